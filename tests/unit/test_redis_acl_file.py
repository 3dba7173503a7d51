"""The ACL file `cohort redis-acl` writes (services/wire/acl.py); what the users may do
on a real Redis is tests/e2e/test_redis_acl.py."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
import yaml

from services.wire.acl import acl_file, agent_rule, unacked_keys

PASSWORD = "p" * 20


def test_every_role_has_a_user_and_passwords_appear_only_hashed() -> None:
    text = acl_file(control_password="c" * 20, agents={"b": "b" * 20, "a": "a" * 20})
    lines = text.splitlines()
    assert [line.split()[1] for line in lines] == ["default", "agent-a", "agent-b"]
    for secret in ("c" * 20, "a" * 20, "b" * 20):
        assert secret not in text
        assert "#" + hashlib.sha256(secret.encode()).hexdigest() in text


def test_replicas_have_no_user_they_report_through_their_agent() -> None:
    text = acl_file(control_password=PASSWORD, agents={})
    assert [line.split()[1] for line in text.splitlines()] == ["default"]


def test_an_agent_reads_only_its_own_queue_and_celery_keys() -> None:
    rule = agent_rule("gpu-2", PASSWORD).split()
    readable = [part for part in rule if part.startswith(("~", "%R"))]
    assert readable == [
        "~node.gpu-2",
        "~_kombu.binding.node.gpu-2",
        "~_kombu.binding_permanent.node.gpu-2",
        "~cohort:unacked:gpu-2",
        "~cohort:unacked:gpu-2:*",
        "%R~cohort:attempt:*",
        "%RW~cohort:nodes",
        "%RW~cohort:progress",
        "%RW~cohort:generation",
    ]
    assert not [part for part in rule if part.startswith("+x") and part != "+xadd"]
    assert unacked_keys("gpu-2")["unacked_key"] == "cohort:unacked:gpu-2"


@pytest.mark.parametrize("node_id", ["", "a b", "a*", "node[1]", "x" * 65, "é"])
def test_a_node_id_that_is_no_safe_key_pattern_is_refused(node_id: str) -> None:
    with pytest.raises(ValueError, match="node id"):
        agent_rule(node_id, PASSWORD)


def test_a_short_password_is_refused() -> None:
    with pytest.raises(ValueError, match="16 characters"):
        acl_file(control_password="short", agents={})


def test_the_command_reads_each_agents_password_from_its_variable() -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("REDIS_")},
        "REDIS_PASSWORD": "c" * 20,
        "REDIS_AGENT_PASSWORD_GPU_BOX_2": "g" * 20,
    }
    done = subprocess.run(
        [sys.executable, "-m", "cli", "redis-acl", "gpu-box-2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == acl_file(control_password="c" * 20, agents={"gpu-box-2": "g" * 20})
    del env["REDIS_AGENT_PASSWORD_GPU_BOX_2"]
    missing = subprocess.run(
        [sys.executable, "-m", "cli", "redis-acl", "gpu-box-2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "cohort: REDIS_AGENT_PASSWORD_GPU_BOX_2 is not set: the Redis password of that user"
    )


def test_the_compose_files_acl_names_the_agent_that_logs_in_with_it() -> None:
    from pathlib import Path

    compose = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text()
    )
    services = compose["services"]
    command = services["redis-acl"]["command"]
    agent = services["agent"]["environment"]
    assert agent["COHORT_NODE_ID"] in command
    assert agent["COHORT_REDIS_URL"].startswith(f"redis://agent-{agent['COHORT_NODE_ID']}:")
    assert (
        "COHORT_SIGNING_KEY" not in agent
        and "COHORT_SIGNING_KEY" in services["scheduler"]["environment"]
    )
