from trnsim import hardware
from trnsim.hardware.topology import torus_neighbours


def test_trn2_torus_neighbour_rule():
    topo = hardware.instance("trn2.48xlarge").topology
    for d in range(16):
        r, c = divmod(d, 4)
        expected = {((r + 1) % 4) * 4 + c, ((r - 1) % 4) * 4 + c, r * 4 + (c + 1) % 4,
                    r * 4 + (c - 1) % 4}
        assert set(topo.neighbours(d)) == expected
        assert len(topo.neighbours(d)) == 4
    assert topo.is_connected()


def test_neuron_ls_connected_devices_order():
    topo = hardware.instance("trn2.48xlarge").topology
    assert topo.connected_devices(0) == [12, 3, 4, 1]
    assert topo.connected_devices(5) == [1, 4, 9, 6]
    assert torus_neighbours(5, 4, 4) == [1, 4, 9, 6]


def test_ultraserver_rings_join_same_xy_chips():
    topo = hardware.instance("trn2-ultraserver").topology
    assert topo.chips == 64 and topo.is_connected()
    for d in range(16):
        group = [s * 16 + d for s in range(4)]
        for i, chip in enumerate(group):
            peers = set(topo.neighbours(chip, kind="ultraserver"))
            assert peers == {group[(i + 1) % 4], group[(i - 1) % 4]}
        # the four same-(x,y) chips form one ring: 4 links among them
        ring_links = [link for link in topo.links if link.kind == "ultraserver"
                      and link.a in group and link.b in group]
        assert len(ring_links) == 4


def test_rings_and_single():
    inf2 = hardware.instance("inf2.48xlarge").topology
    assert inf2.kind == "ring" and inf2.is_connected()
    assert all(len(inf2.neighbours(d)) == 2 for d in range(12))
    assert hardware.instance("inf2.xlarge").topology.links == ()


def test_trn3_switched_fabric_connected():
    topo = hardware.instance("trn3-gen1-ultraserver").topology
    assert topo.kind == "switched" and topo.chips == 64 and topo.is_connected()
