"""Names the library defines and a URL may carry, in one light module (no numpy, no torch) so that URL parsing
(mha_viz.params) reads them without loading the models."""

DETECTOR_KINDS = ("previous", "duplicate", "induction")  # mha_viz.analysis.KINDS: the head detectors
COMPOSITION_KINDS = ("q", "k", "v")  # mha_viz.analysis.composition.KINDS: Q-, K- and V-composition
TASK_NAMES = ("prev-first", "prev-2back-first", "prev-match")  # the keys of mha_viz.training.TASKS, in order
PATCH_SITES = ("head", "head_position", "residual", "pattern")  # mha_viz.analysis.patching.SITES
PATCH_CHOICES = (*PATCH_SITES, "path")  # the Patching section's choices: the sites, and path patching (a scan)
PATCH_THROUGH = ("q", "k", "v")  # mha_viz.analysis.patching.THROUGH: path patching into queries, keys or values
PATCH_DIRECTIONS = ("denoise", "noise")  # mha_viz.analysis.patching.DIRECTIONS
PATCH_METRICS = ("logit_diff", "logprob", "prob")  # mha_viz.analysis.patching.METRICS
ABLATION_KINDS = ("zero", "mean", "resample")  # mha_viz.analysis.knockout.ABLATIONS
SINK_KINDS = ("none", "logit", "tokens")  # mha_viz.variants.SINKS: no sink, a sink logit per head, the first tokens
