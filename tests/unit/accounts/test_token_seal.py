"""A token key is sealed to its user's password hash (issue 69, N1): no database here,
only what :func:`tracker.accounts.security.key_fits` decides from a key and a user."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from tracker.accounts.security import key_fits, sealed_key


def _user(pk: int = 7, password: str = "pw-rider"):
    user = get_user_model()(pk=pk, username=f"user{pk}")
    user.set_password(password)
    return user


def test_a_sealed_key_fits_its_user_while_the_password_stays():
    user = _user()
    key = sealed_key(user)
    assert len(key) == 40 and int(key, 16) >= 0  # what DRF's column and clients expect
    assert key_fits(key, user)
    assert sealed_key(user) != key  # random: two keys of one user differ


def test_a_new_password_unseals_every_key_issued_before_it():
    user = _user()
    key = sealed_key(user)
    user.set_password("pw-rider")  # the same password, a new salt: a new hash
    assert not key_fits(key, user)


def test_a_key_fits_no_other_user_even_with_the_same_password_hash():
    user, other = _user(7), _user(8)
    other.password = user.password
    assert not key_fits(sealed_key(user), other)


def test_keys_of_another_shape_never_fit():
    user = _user()
    key = sealed_key(user)
    assert not key_fits(key[:-1], user)
    assert not key_fits(key + "0", user)
    assert not key_fits("", user)


def test_rotating_the_secret_key_keeps_keys_while_the_old_one_is_a_fallback(settings):
    user = _user()
    key = sealed_key(user)
    old = settings.SECRET_KEY
    settings.SECRET_KEY = "a-new-secret-key-" + "x" * 40
    settings.SECRET_KEY_FALLBACKS = [old]
    assert key_fits(key, user)
    settings.SECRET_KEY_FALLBACKS = []
    assert not key_fits(key, user)
