"""bench/converged.py, the converged-base record: the rows it takes from the two benchmark runs and the learning curve,
with an equal-compute run that scored brefine too, and with a `--base-only` one that scored the base alone."""
import sys
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent/'bench'))
import converged

def _row(m): return dict(miou=m, boundary_iou=m - .1, boundary_f1=m - .2, trimap_iou=m - .3, seconds_per_image=.5, extra=1)

CURVE = dict(best_epoch=40, stopped_at=35, epoch=48, stop_rule='rule', kept=dict(best=25, plus_best=40), command='c',
             curve=[dict(val_miou=v) for v in (.5, .6, .7)])
RUN = dict(dataset='D', settings={'alpha': .1}, ablation_settings={}, training=dict(embedder_epochs=54), base_weights='b.pth',
           command='run', **{k: _row(.6 + i / 100) for i, k in enumerate(converged.ROWS)})

def test_full_equal_run():
    t = converged.table(CURVE, RUN, dict(base=_row(.62), brefine=_row(.65), settings={'alpha': .3}, command='eq'))
    test_keys = set(converged.ROWS) | {'equal_compute_base', 'equal_compute_brefine', 'training'}
    assert test_keys <= set(t) and t['not_measured'] == []
    assert t['equal_compute_brefine'] == {k: _row(.65)[k] for k in converged.METRICS}   # only the metrics, no other field
    assert t['training']['base_epochs'] == 25          # the converged weights' epoch, not the best of the extra phase
    assert t['training']['stop_rule'] == 'rule' and t['training']['stopped_after'] == 35
    assert t['training']['val_miou_curve'] == [.5, .6, .7] and t['training']['embedder_epochs'] == 54

def test_base_only_equal_run():
    t = converged.table(CURVE, RUN, dict(base=_row(.62), command='eq'))
    assert t['equal_compute_brefine'] is None and t['not_measured'] == ['equal_compute_brefine']
    assert t['equal_compute_base']['miou'] == .62

def test_missing_rows_refused():
    with pytest.raises(ValueError, match='oracle'): converged.table(CURVE, {k: v for k, v in RUN.items() if k != 'oracle'}, dict(base=_row(.6)))
    with pytest.raises(ValueError, match='equal-compute base'): converged.table(CURVE, RUN, dict(brefine=_row(.6)))
