"""``trimtab.util.graph.components`` by hand: the groups the P/D simulation and ``online watch`` read."""
from trimtab.util.graph import components


def test_components_by_hand():
    edges = [(4, 7), (0, 2), (1, 3), (1, 2), (5, 6)]
    assert components(edges) == [[0, 1, 2, 3], [4, 7], [5, 6]]
    assert components(reversed(edges)) == components(edges)  # any order of the edges
    assert components([("w:a", "d:x"), ("w:b", "d:x"), ("w:c", "d:y")]) == [["d:x", "w:a", "w:b"],
                                                                             ["d:y", "w:c"]]
    assert components([(3, 3)]) == [[3]] and components([]) == []
