"""How good the rankings are: the official mAP protocols (Oxford / Paris, Holidays, revisited,
UKBench), the paper's tables on a benchmark, sweeps for the plots, and the ASMK baseline."""

from .asmk import ASMKCodebook, ASMKIndex, scaled_vocabulary_size
from .experiment import (DEFAULT_LEARNING, MethodVectors, aggregate_all, dataset_descriptors, evaluate_dataset,
                         evaluate_dataset_asmk, run_experiment)
from .metrics import (EvaluationResult, MapResult, ProtocolResult, ap_from_positions, average_precision,
                      check_rankings, compute_map, evaluate, ns_scores, positive_positions, precision_at_k,
                      precision_recall, query_precision_recall)
from .sweep import DEFAULT_CONFIGS, SweepResult, run_sweep

__all__ = ["DEFAULT_CONFIGS", "DEFAULT_LEARNING", "ASMKCodebook", "ASMKIndex", "EvaluationResult", "MapResult",
           "MethodVectors", "ProtocolResult", "SweepResult", "aggregate_all", "ap_from_positions",
           "average_precision", "check_rankings", "compute_map", "dataset_descriptors", "evaluate",
           "evaluate_dataset", "evaluate_dataset_asmk", "ns_scores", "positive_positions", "precision_at_k",
           "precision_recall", "query_precision_recall", "run_experiment", "run_sweep", "scaled_vocabulary_size"]
