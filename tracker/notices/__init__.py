"""Notices: changes every process must hear about, passed through the database.

Some changes matter to state a process keeps for itself: an open WebSocket whose
access ended, a kept copy of an order whose owner or names changed in the admin.
The process that makes the change may not be the one holding that state (two web
workers in embedded mode, whose in-memory channel layers reach only themselves; a
management command; several servers in production), so the change is written down
as a :class:`~tracker.notices.models.Notice` once it commits
(:func:`~tracker.notices.services.announce`), and every process that keeps such
state reads new notices a few times a second (:mod:`tracker.notices.listener`).
The database is the one thing every process of both ways to run shares.
"""
