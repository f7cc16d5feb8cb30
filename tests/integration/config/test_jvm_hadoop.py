"""The embedded mode's Java class is built from source by the machine's javac, once."""

from __future__ import annotations

import logging
import os
import zipfile

from jvm import hadoop as jvm


def test_the_jar_is_built_once_and_again_only_when_a_source_is_newer(tmp_path):
    jar = tmp_path / "ordertrack-hadoop.jar"
    assert jvm.build_jar(jar) == jar
    names = zipfile.ZipFile(jar).namelist()
    assert "ordertrack/NioLocalFileSystem.class" in names
    assert "ordertrack/NioLocalFileSystem$Raw.class" in names
    built = jar.stat().st_mtime_ns
    jvm.build_jar(jar)
    assert jar.stat().st_mtime_ns == built  # up to date: not compiled again
    newest = max(source.stat().st_mtime for source in jvm.SOURCES.rglob("*.java"))
    older = newest - 60
    os.utime(jar, (older, older))
    jvm.build_jar(jar)
    assert jar.stat().st_mtime > older
    assert [p.name for p in tmp_path.iterdir()] == [jar.name]  # no build folder left


def test_without_a_javac_the_job_runs_on_hadoops_own_class_and_says_so(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("ORDERTRACK_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with caplog.at_level(logging.WARNING, logger="jvm.hadoop"):
        assert jvm.spark_conf() == {}
    assert "no javac" in caplog.text
    assert "chmod process per file" in caplog.text
