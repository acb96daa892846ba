"""Trace and scenario loaders: good files load, bad files name file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.domain import GiB, InputFileError
from gpupool.simulator.openb import load_nodes, load_pods
from gpupool.simulator.scenario import load_scenario

NODES = (
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n1,64000,262144,2,P100\nn2,96000,786432,8,G2\ncpu,32000,1024,0,\n"
)
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "p0,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
    "p1,6000,12288,1,460,V100M16|V100M32,LS,Running,427061,12902960,427061\n"
    "p2,4000,0,0,0,,BE,Pending,5,,\n"
    "p3,8000,100,8,1000,,LS,Running,10,20,11\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_openb_files_load_with_every_column(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "n.csv", NODES))
    assert [(n.name, n.gpu_count, n.cpu_milli) for n in nodes] == [
        ("n1", 2, 64000),
        ("n2", 8, 96000),
        ("cpu", 0, 32000),
    ]
    assert nodes[1].gpus[0].model == "G2"
    pods = load_pods(write(tmp_path, "p.csv", PODS))
    assert pods[1].request.gpu_milli == 460
    assert pods[1].request.models == ("V100-16GB", "V100-32GB")
    assert pods[1].creation_time == 427061 and pods[1].deletion_time == 12902960
    assert pods[2].request.gpu_count == 0 and pods[2].scheduled_time is None
    assert pods[3].request.whole_cards and pods[3].request.gpu_count == 8


def test_five_column_pod_lists_load(tmp_path: Path) -> None:
    text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,10,1,250\nb,2000,0,0,0\n"
    pods = load_pods(write(tmp_path, "short.csv", text))
    assert [p.request.gpu_request_milli for p in pods] == [250, 0]
    assert pods[0].deletion_time is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,cpu_milli\n", "short.csv:1: header lacks column(s) memory_mib, num_gpu, gpu_milli"),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,10,1,2500\n",
            "bad.csv:2: column gpu_milli: a GPU task needs gpu_milli between 1 and 1000; got 2500",
        ),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,x,10,1,250\n",
            "bad.csv:2: column cpu_milli: invalid value 'x'",
        ),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,10,1,250\nb,1,10,2,500\n",
            "bad.csv:3: column gpu_milli: a task with 2 GPUs must take whole GPUs",
        ),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,1,10,1,250,B300\n",
            "bad.csv:2: column gpu_spec: unknown GPU model 'B300'",
        ),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,10,-1,250\n",
            "bad.csv:2: column num_gpu: invalid value '-1'",
        ),
        ("", "bad.csv:1: file is empty"),
    ],
)
def test_bad_pod_lists_name_file_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    name = "short.csv" if "header" in message else "bad.csv"
    with pytest.raises(InputFileError) as info:
        load_pods(write(tmp_path, name, text))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,2,\n",
            "n.csv:2: column model: node has 2 GPUs but no model",
        ),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,2,K80\n",
            "n.csv:2: column model: unknown GPU model 'K80'",
        ),
        ("sn,cpu_milli,memory_mib,gpu\n", "n.csv:1: header lacks column(s) model"),
    ],
)
def test_bad_node_lists(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_nodes(write(tmp_path, "n.csv", text))


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="cannot read file"):
        load_pods(tmp_path / "absent.csv")


SCENARIO = """\
name: tiny
cluster:
  - name: a100
    count: 2
    cpu: 96
    memory: 1Ti
    gpus: 8xA100-80GB
    nvlink: true
    numa: 2
workload:
  - name: chat
    count: 3
    cpu: 4
    gpu-memory: 16Gi
    gpu-compute: 25
    gpu-model: A100-80GB|H800
  - name: train
    count: 1
    cpu: 64
    gpus: 8
  - name: nb
    cpu: 500m
    gpu-share: 250
"""


def test_scenario_yaml_loads(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, "s.yaml", SCENARIO))
    assert sc.name == "tiny"
    assert [n.name for n in sc.nodes] == ["a100-0", "a100-1"]
    assert sc.nodes[0].gpus[5].numa_node == 1 and sc.nodes[0].gpus[5].nvlink_domain == 0
    assert [r.name for r in sc.requests] == ["chat-0", "chat-1", "chat-2", "train", "nb"]
    chat = sc.requests[0]
    assert chat.gpu_memory_bytes == 16 * GiB and chat.compute_pct == 25
    assert chat.models == ("A100-80GB", "H800")
    assert sc.requests[3].gpu_count == 8 and sc.requests[4].cpu_milli == 500


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("gpu-memory: 16Gi", "gpu-memory: -3"),
            "s.yaml:11: column gpu-memory: gpu-memory must be a positive quantity",
        ),
        (("gpus: 8xA100-80GB", "gpus: 8xK80"), "s.yaml:3: column gpus: unknown GPU model 'K80'"),
        (
            ("    cpu: 4\n", "    cpu: 4\n    colour: blue\n"),
            "s.yaml:11: column colour: unknown key",
        ),
        (
            ("gpu-compute: 25", "gpu-compute: 250"),
            "s.yaml:11: request 'chat': GPU compute must be a percentage",
        ),
        (
            ("workload:", "workload: {"),
            "s.yaml:11: column 3: not valid YAML: expected the node content",
        ),
    ],
)
def test_bad_scenarios(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    text = SCENARIO.replace(*edit)
    with pytest.raises(InputFileError) as info:
        load_scenario(write(tmp_path, "s.yaml", text))
    assert message in str(info.value)
