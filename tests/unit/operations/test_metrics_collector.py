"""The web's /metrics merges its workers' metric files, one of which may be mid-creation."""

from __future__ import annotations

import struct

import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from tracker.operations.views import WorkersCollector


def test_a_metric_file_a_worker_has_created_but_not_sized_is_left_out_of_the_scrape(tmp_path):
    (tmp_path / "counter_4242.db").touch()  # created, not yet sized (prometheus-client)
    with pytest.raises(struct.error):  # the library's collector fails the whole scrape
        list(MultiProcessCollector(None, path=str(tmp_path)).collect())
    assert list(WorkersCollector(None, path=str(tmp_path)).collect()) == []
