"""Notebook widgets (ipywidgets): search, descriptor weights, evaluation, duplicates.

    from streamk.widgets import SearchApp, WeightsView, EvalDashboard, DuplicatesView
    SearchApp(index, dataset=dataset)        # query, crop, k, exact/PQ, sum/democratic/GMP, live
    WeightsView(index.encoder)               # keypoints coloured by democratic and GMP weights
    EvalDashboard(dataset, configs)          # mAP table, per-query AP, PR curves, the paper's plots
    DuplicatesView(index)                    # duplicate pairs classed exact / copy / same scene, groups

Needs the ``notebooks`` extra: ``pip install -e ".[notebooks]"``.
"""

_WHERE = {"SearchApp": "search", "WeightsView": "weights", "EvalDashboard": "evaluate",
          "DuplicatesView": "duplicates"}
__all__ = list(_WHERE)


def __getattr__(name):
    # imported on first use: `import streamk.widgets.common` stays light
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
