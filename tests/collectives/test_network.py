"""Routes and max-min fair sharing."""

import numpy as np
import pytest

from trnsim import hardware
from trnsim.collectives.network import Network
from trnsim.collectives.placement import Machine
from trnsim.hardware.fabric import TRAINIUM_FABRIC, efa_bytes_per_s_per_chip


def _network(instance="trn1.32xlarge", nodes=1, lnc=None):
    return Network(Machine.build(hardware.instance(instance), nodes, lnc))


def _endpoint(net, node, chip, core):
    m = net.machine
    return (node * m.chips_per_node + chip) * m.cores_per_chip + core


def _hops(net, a, b):
    route = net.route_ids(np.array([a]), np.array([b]))[0]
    resources = net._route_res[route]
    return [r for r in resources if net.link_base <= r < net.nic_base]


def test_torus_routes_are_dimension_order_shortest_paths():
    net = _network()
    cases = [(0, 1, 1), (0, 3, 1), (0, 12, 1), (0, 5, 2), (0, 10, 4), (5, 15, 4), (5, 14, 3)]
    for src, dst, expected in cases:
        assert len(_hops(net, _endpoint(net, 0, src, 0), _endpoint(net, 0, dst, 0))) == expected
    # cores of one chip: ports only, no link
    assert _hops(net, 0, 1) == []


def test_ultraserver_routes_use_the_inter_server_ring():
    net = _network("trn2-ultraserver")
    assert len(_hops(net, _endpoint(net, 0, 0, 0), _endpoint(net, 0, 16, 0))) == 1
    assert len(_hops(net, _endpoint(net, 0, 0, 0), _endpoint(net, 0, 48, 0))) == 1  # ring wrap
    assert len(_hops(net, _endpoint(net, 0, 0, 0), _endpoint(net, 0, 37, 0))) == 4  # 2 Z + 1 + 1


def test_switched_and_ring_topologies_route_by_shortest_path():
    trn3 = _network("trn3-gen1-ultraserver")
    assert len(_hops(trn3, _endpoint(trn3, 0, 0, 0), _endpoint(trn3, 0, 5, 0))) == 2  # via switch
    inf2 = _network("inf2.48xlarge")
    assert len(_hops(inf2, _endpoint(inf2, 0, 0, 0), _endpoint(inf2, 0, 6, 0))) == 6
    assert len(_hops(inf2, _endpoint(inf2, 0, 0, 0), _endpoint(inf2, 0, 10, 0))) == 2


def test_inter_node_routes_go_through_both_chips_efa_interfaces():
    net = _network(nodes=2)
    a, b = _endpoint(net, 0, 3, 1), _endpoint(net, 1, 7, 0)
    route = net.route_ids(np.array([a]), np.array([b]))[0]
    resources = list(net._route_res[route])
    chips = net.machine.chips_per_node
    assert resources == [a, net.nic_base + 3, net.nic_base + (2 + 1) * chips + 7,
                         net.endpoints + b]
    assert net.latency_ns(np.array([route]))[0] == TRAINIUM_FABRIC.efa_latency_ns
    efa = efa_bytes_per_s_per_chip(hardware.instance("trn1.32xlarge"))
    assert efa == pytest.approx(800e9 / 8 / 16)
    assert net.capacity[net.nic_base + 3] == pytest.approx(efa / 1e9)


def test_max_min_fair_sharing():
    net = _network()
    port = TRAINIUM_FABRIC.collective_bytes_per_s_per_core / 1e9
    link = 384 * 2**30 / 4 / 1e9  # a quarter of the chip's NeuronLink bandwidth, each way
    # two flows out of one core share its port equally
    r = net.rates(net.route_ids(np.array([0, 0]), np.array([2, 4])))
    assert r == pytest.approx([port / 2, port / 2])
    # chip 0's two cores send to chip 2, chip 1's two to chip 3: both 2 hops along row 0; on a
    # tie the even chip goes forward (0 -> 1 -> 2), the odd one backward (1 -> 0 -> 3), so each
    # direction of the 0-1 link carries two flows, which get half of it (51 GB/s < the port)
    r = net.rates(net.route_ids(np.array([0, 1, 2, 3]), np.array([4, 5, 6, 7])))
    assert link / 2 < port
    assert r == pytest.approx([link / 2] * 4)
    # a third flow on a free path next to a bottlenecked one still gets its own limit (the port)
    r = net.rates(net.route_ids(np.array([0, 1, 2, 3, 8]), np.array([4, 5, 6, 7, 9])))
    assert r == pytest.approx([link / 2] * 4 + [port])


def test_parallel_flows_on_one_route_get_equal_shares_and_rates_are_cached():
    net = _network()
    routes = net.route_ids(np.array([0, 0, 0]), np.array([1, 1, 1]))
    assert len(set(routes.tolist())) == 1
    r = net.rates(routes)
    assert r == pytest.approx([TRAINIUM_FABRIC.collective_bytes_per_s_per_core / 3e9] * 3)
    assert net.rates(routes) is not r and len(net._rate_cache) == 1
