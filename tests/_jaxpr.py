"""Shared test helper: walk a jaxpr's equations, sub-jaxprs included."""


def eqns(jaxpr, skip=()):
    """Every equation of ``jaxpr`` and of the jaxprs in its equations' params, depth first;
    equations whose primitive is in ``skip`` are yielded but not entered."""
    for e in jaxpr.eqns:
        yield e
        if e.primitive.name in skip:
            continue
        for p in e.params.values():
            for sub in p if isinstance(p, (list, tuple)) else [p]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from eqns(inner, skip)
