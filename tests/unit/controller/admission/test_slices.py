"""``admission.slices``: GPU devices per node from ResourceSlices, minus allocations and taints."""

from __future__ import annotations

from tests.builders.claims import DRIVER, allocated_claim, device_taint_rule, resource_slice
from torchgate.controller.admission.slices import class_drivers, driver_keys, free_devices

GPU = "nvidia.com/gpu"
KEYS = {DRIVER: frozenset({GPU})}


def test_each_node_counts_its_gpu_devices() -> None:
    slices = [resource_slice("a", 8), resource_slice("b", 4)]
    assert free_devices(slices, [], KEYS) == {"a": {GPU: 8000}, "b": {GPU: 4000}}


def test_devices_of_other_drivers_and_shared_slices_do_not_count() -> None:
    slices = [resource_slice("a", 2, driver="nic.example.com"), resource_slice(None, 8)]
    assert free_devices(slices, [], KEYS) == {}


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    slices = [resource_slice("a", 8, generation=1), resource_slice("a", 6, generation=2)]
    assert free_devices(slices, [], KEYS) == {"a": {GPU: 6000}}


def test_allocated_devices_are_not_free() -> None:
    claims = [allocated_claim("a", 0, 1, 2)]
    assert free_devices([resource_slice("a", 8)], claims, KEYS) == {"a": {GPU: 5000}}


def test_a_claim_its_pod_counts_already_is_not_taken_twice() -> None:
    claims = [allocated_claim("a", 0, 1, 2, owner="p")]
    counted = {("default", "p"): {GPU: 3000, "pods": 1000}}
    free = free_devices([resource_slice("a", 8)], claims, KEYS, counted.get)
    assert free == {"a": {GPU: 8000}}
    cpu_only = {("default", "p"): {"cpu": 1000}}
    assert free_devices([resource_slice("a", 8)], claims, KEYS, cpu_only.get) == {"a": {GPU: 5000}}


def test_a_device_tainted_noschedule_or_noexecute_is_not_free() -> None:
    taints = {
        0: [{"key": "broken", "effect": "NoSchedule"}],
        1: [{"key": "drain", "effect": "NoExecute"}],
        2: [{"key": "note", "effect": "None"}],
    }
    assert free_devices([resource_slice("a", 4, taints=taints)], [], KEYS) == {"a": {GPU: 2000}}


def test_a_device_a_device_taint_rule_taints_noschedule_or_noexecute_is_not_free() -> None:
    slices = [resource_slice("a", 4), resource_slice("b", 2)]
    rules = [
        device_taint_rule("one-gpu", driver=DRIVER, pool="a", device="gpu-0"),
        device_taint_rule("drain", "NoExecute", pool="a", device="gpu-1"),
        device_taint_rule("note", "None", pool="a", device="gpu-2"),
        device_taint_rule("other-driver", driver="nic.example.com", pool="b"),
    ]
    assert free_devices(slices, [], KEYS, taint_rules=rules) == {
        "a": {GPU: 2000},
        "b": {GPU: 2000},
    }


def test_a_device_taint_rule_selects_all_devices_only_with_an_empty_selector() -> None:
    slices = [resource_slice("a", 2), resource_slice("b", 2)]
    whole_pool = device_taint_rule("whole-pool", pool="b")
    assert free_devices(slices, [], KEYS, taint_rules=[whole_pool]) == {"a": {GPU: 2000}}
    everything = device_taint_rule("everything")
    assert free_devices(slices, [], KEYS, taint_rules=[everything]) == {}
    no_selector = device_taint_rule("nothing")
    del no_selector["spec"]["deviceSelector"]
    assert free_devices(slices, [], KEYS, taint_rules=[no_selector]) == {
        "a": {GPU: 2000},
        "b": {GPU: 2000},
    }


def test_a_device_class_selects_the_drivers_its_cel_names() -> None:
    by_cel = {
        "metadata": {"name": "gpus"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }
    assert class_drivers(by_cel) == {"gpu.example.com"}
    assert class_drivers({"metadata": {"name": DRIVER}, "spec": {}}) == {DRIVER}
    assert driver_keys([by_cel], {"gpus": "example.com/gpu"}) == {
        "gpu.example.com": {"example.com/gpu"}
    }


def test_a_device_two_gpu_classes_select_counts_under_both_keys() -> None:
    keys = {DRIVER: frozenset({GPU, "example.com/gpu"})}
    assert free_devices([resource_slice("a", 2)], [], keys) == {
        "a": {GPU: 2000, "example.com/gpu": 2000}
    }
