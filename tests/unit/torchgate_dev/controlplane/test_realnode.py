"""The real node's record and tokens (torchgate_dev.controlplane.realnode)."""

from __future__ import annotations

import json
from pathlib import Path

from torchgate_dev.controlplane.realnode import RealNode
from torchgate_dev.node import config as node_config


def test_real_node_record_is_absent_until_claimed_and_round_trips_after() -> None:
    node = RealNode(name="real-0", labels={"pool": "a100"})
    assert node.to_json() is None
    node.since, node.registry, node.kube_proxy = 12.5, "127.0.0.1:5000", Path("/bin/kube-proxy")

    record = node.to_json()

    assert record is not None
    again = RealNode.from_json(json.loads(json.dumps(record)))
    assert (again.name, again.since, again.registry, again.kube_proxy) == (
        "real-0",
        12.5,
        "127.0.0.1:5000",
        Path("/bin/kube-proxy"),
    )


def test_real_node_tokens_name_the_kubelet_dns_and_kube_proxy_identities() -> None:
    node = RealNode(name="real-0")

    lines = [line.split(",") for line in node.token_lines()]

    assert [fields[0] for fields in lines] == list(node.tokens)
    assert len(set(node.tokens)) == 3
    assert [fields[1] for fields in lines] == [
        node_config.node_user("real-0"),
        node_config.DNS_USER,
        node_config.KUBE_PROXY_USER,
    ]
    assert [fields[3:] for fields in lines] == [['"system:nodes"'], [], []]
