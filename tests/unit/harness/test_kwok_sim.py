"""The kwok configuration that gives remote loopback pods logs, exec and attach
(harness/kube_offload_harness/kwok_sim.py). Whether kwok really serves them is checked end to end
(tests/e2e/test_logs_exec.py); here: the documents' shape and the CRI log format."""

import re
from datetime import datetime, timezone

import pytest
import yaml

from kube_offload_harness import kwok_sim

# The CRI log line format read by k8s.io/cri-client/pkg/logs (parseCRILog).
CRI_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (stdout|stderr) F (.*)$")


def test_cri_line_format():
    moment = datetime(2026, 11, 22, 14, 7, 20, 405669, tzinfo=timezone.utc)
    assert kwok_sim.cri_log_line(moment, "hello") == "2026-11-22T14:07:20.405669000Z stdout F hello\n"
    assert kwok_sim.cri_log_line(moment, "oops", "stderr").split(" ")[1] == "stderr"
    with pytest.raises(ValueError):
        kwok_sim.cri_log_line(moment, "a\nb")
    with pytest.raises(ValueError):
        kwok_sim.cri_log_line(moment, "a", "stdin")


def test_documents_cover_logs_exec_attach_and_port_forward_for_every_pod(tmp_path):
    docs = kwok_sim.remote_config_documents(tmp_path)
    assert [d["kind"] for d in docs] == ["ClusterLogs", "ClusterExec", "ClusterAttach", "ClusterPortForward"]
    for doc in docs:
        assert doc["apiVersion"] == "kwok.x-k8s.io/v1alpha1"
        assert doc["metadata"]["name"]  # ObjectMeta is required by kwok's types
        assert "selector" not in doc["spec"]  # every pod
    files = kwok_sim.simulated_files(tmp_path)
    (log,) = docs[0]["spec"]["logs"]
    assert "containers" not in log  # the default entry for every container
    assert log["logsFile"] == str(files.logs) and log["previousLogsFile"] == str(files.previous_logs)
    (target,) = docs[1]["spec"]["execs"]
    assert target["local"]["workDir"] == str(files.exec_workdir)
    assert {"name": kwok_sim.EXEC_ENV_NAME, "value": kwok_sim.EXEC_ENV_VALUE} in target["local"]["envs"]
    assert {"name": "TAR_OPTIONS", "value": "--blocking-factor=1"} in target["local"]["envs"]  # kubectl cp
    assert docs[2]["spec"]["attaches"] == [{"logsFile": str(files.logs)}]
    (forward,) = docs[3]["spec"]["forwards"]
    assert "ports" not in forward  # every port
    assert forward["target"] == {"address": "127.0.0.1", "port": kwok_sim.port_forward_target(tmp_path)}
    assert files.exec_workdir.is_dir()
    # Round-trips through YAML as the harness writes it.
    assert list(yaml.safe_load_all(yaml.safe_dump_all(docs))) == docs


def test_log_files_are_cri_and_hold_the_documented_lines(tmp_path):
    files = kwok_sim.write_simulated_files(tmp_path, now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    parsed = [CRI_LINE.match(line).groups() for line in files.logs.read_text().splitlines()]
    assert [text for _, _, text in parsed] == [*kwok_sim.OLD_LINES, *kwok_sim.CURRENT_LINES, kwok_sim.STDERR_LINE]
    assert [stream for _, stream, _ in parsed].count("stderr") == 1
    assert all(ts.startswith("2001-") for ts, _, text in parsed if text in kwok_sim.OLD_LINES)
    stamps = [ts for ts, _, _ in parsed]
    assert stamps == sorted(stamps)
    previous = [CRI_LINE.match(line).group(3) for line in files.previous_logs.read_text().splitlines()]
    assert previous == list(kwok_sim.PREVIOUS_LINES)


def test_existing_logs_are_kept_and_appends_are_cri(tmp_path):
    files = kwok_sim.write_simulated_files(tmp_path)
    kwok_sim.append_log_lines(files.logs, ["more 1", "more 2"], stream="stderr")
    before = files.logs.read_text()
    kwok_sim.remote_config_documents(tmp_path)  # a second remote cluster of the same state dir
    assert files.logs.read_text() == before
    last = before.splitlines()[-2:]
    assert [CRI_LINE.match(line).group(2, 3) for line in last] == [("stderr", "more 1"), ("stderr", "more 2")]


def test_note_names_the_files():
    note = kwok_sim.remote_kwok_config_note()
    assert "container.log" in note and "ClusterExec" in note and "exit status" in note


def test_the_port_forward_target_is_chosen_once_per_state_directory(tmp_path):
    port = kwok_sim.port_forward_target(tmp_path)
    assert 1 <= port <= 65535
    assert kwok_sim.port_forward_target(tmp_path) == port
    assert kwok_sim.remote_config_documents(tmp_path)[3]["spec"]["forwards"][0]["target"]["port"] == port
