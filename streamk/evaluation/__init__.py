"""How good the rankings are: the official mAP protocols (Oxford / Paris, Holidays, revisited,
UKBench), the paper's tables on a benchmark, sweeps for the plots, and the ASMK baseline."""

from ..exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".asmk": ("ASMKCodebook", "ASMKIndex", "scaled_vocabulary_size"),
    ".experiment": ("DEFAULT_LEARNING", "MethodVectors", "aggregate_all", "dataset_descriptors",
        "evaluate_dataset", "evaluate_dataset_asmk", "run_experiment"),
    ".metrics": ("EvaluationResult", "MapResult", "ProtocolResult", "ap_from_positions", "average_precision",
        "check_rankings", "compute_map", "evaluate", "ns_scores", "positive_positions", "precision_at_k",
        "precision_recall", "query_precision_recall"),
    ".sweep": ("DEFAULT_CONFIGS", "SweepResult", "run_sweep"),
})
