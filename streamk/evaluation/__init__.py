"""How good the rankings are: the official mAP protocols (Oxford / Paris, Holidays, revisited,
UKBench), the paper's tables on a benchmark, sweeps for the plots, and the ASMK baseline."""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .asmk import (
        ASMKCodebook as ASMKCodebook, ASMKIndex as ASMKIndex, scaled_vocabulary_size as scaled_vocabulary_size,
    )
    from .experiment import (
        DEFAULT_LEARNING as DEFAULT_LEARNING, MethodVectors as MethodVectors, aggregate_all as aggregate_all,
        dataset_descriptors as dataset_descriptors, evaluate_dataset as evaluate_dataset,
        evaluate_dataset_asmk as evaluate_dataset_asmk, run_experiment as run_experiment,
    )
    from .metrics import (
        EvaluationResult as EvaluationResult, MapResult as MapResult, ProtocolResult as ProtocolResult,
        ap_from_positions as ap_from_positions, average_precision as average_precision,
        check_rankings as check_rankings, compute_map as compute_map, evaluate as evaluate,
        ns_scores as ns_scores, positive_positions as positive_positions, precision_at_k as precision_at_k,
        precision_recall as precision_recall, query_precision_recall as query_precision_recall,
    )
    from .report import run_eval as run_eval
    from .sweep import DEFAULT_CONFIGS as DEFAULT_CONFIGS, SweepResult as SweepResult, run_sweep as run_sweep

__all__, __getattr__, __dir__ = lazy_exports(__name__)
