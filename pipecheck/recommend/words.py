"""The words of the recommendations: the reasons the rules give, built from measured and
predicted figures (no rule logic here).
"""

from __future__ import annotations


from pipecheck.analysis.causes import CONTENDED_CPU_FRACTION
from pipecheck.analysis.model import Prediction, ThroughputModel
from pipecheck.loader_settings import LoaderSettings
from pipecheck.kinds import (
    CPU_BOUND,
    IO_BOUND,
)
from pipecheck.units import batch_rate, count, percent, seconds
from pipecheck.recommend.limits import (producer_class)
from pipecheck.recommend.context import (RuleContext)


LIMIT_WORDS = {
    "step": "the training step",
    "workers": "the worker count",
    "cpu": "the usable CPUs",
    "batch-time tail": "slow batches",
    "serial": "loading in the main process",
}


STEP_SLOWDOWN_WORDS_FRACTION = 0.05
"""A predicted step slowdown is named in a reason from 5% up (the same margin as
:data:`MIN_GAIN_FRACTION`)."""


def stall_now(context: RuleContext, settings: LoaderSettings, prediction: Prediction) -> str:
    """The steady stall before a rule's change: measured when no earlier rule changed the
    settings, else the model's prediction for the settings so far."""
    if settings == context.model.measured:
        return f"{percent(context.measured_stall)} of loop time in steady state"
    return f"{percent(prediction.steady_stall_fraction)} predicted after the changes above"


def contention_words(
    model: ThroughputModel, before: LoaderSettings, after: LoaderSettings
) -> str:
    """Sentences on what the change costs in cores (empty without host data or cost): the
    step's predicted slowdown as the workers take cores from it, and the other processes'
    load the prediction assumes continues."""
    load = model.load
    if load is None:
        return ""
    words = ""
    step_before = model.step_s(before.num_workers)
    step_after = model.step_s(after.num_workers)
    if step_after > step_before * (1.0 + STEP_SLOWDOWN_WORDS_FRACTION):
        words += (f" The step is predicted to slow from {seconds(step_before)} to "
                  f"{seconds(step_after)} as the workers take cores from it (its threads and "
                  "the workers share the cores left to this run fairly).")
    if load.others_cpus >= CONTENDED_CPU_FRACTION * load.usable_cpus:
        keep = ("the prediction assumes they keep them" if not load.other_groups else
                f"the kernel splits the cores fairly between this run's scheduling group and "
                f"the {count(len(load.other_groups), 'other group')} seen, so the prediction "
                f"gives this run {load.cores_left():.1f} cores")
        words += (f" Other processes used {load.others_cpus:.1f} of the {load.usable_cpus:g} "
                  f"usable cores during the run; {keep} (their load's low and high over the "
                  "run bound the interval).")
    if load.same_group_cpus >= CONTENDED_CPU_FRACTION * load.usable_cpus:
        words += (f" Processes in this run's CPU scheduling group (same session or cgroup) used "
                  f"{load.same_group_cpus:.1f} cores; the kernel shares those cores thread for "
                  "thread, so the workers are predicted to get part of them.")
    return words


def limit_note(model: ThroughputModel, prediction: Prediction) -> str:
    note = f"then limited by {LIMIT_WORDS[prediction.limit]}"
    if prediction.limit == "cpu" and model.load is None:
        # Measured on the demo (2 CPUs, 0 -> 1 worker): throughput came within 8% of the
        # prediction, but the contention showed as longer steps rather than as data wait.
        note += (f"; the step and the workers share {model.usable_cpus} CPUs, so part of the "
                 "predicted stall may show as slower steps instead")
    return note


def more_workers_reason(
    context: RuleContext,
    settings: LoaderSettings,
    workers: int,
    capacity: float,
    prediction: Prediction,
) -> str:
    model = context.model
    demand = model.demand_batches_per_s
    stall = percent(context.measured_stall)
    if settings.num_workers == 0:
        return (
            f"With num_workers=0 the main process spends {seconds(1.0 / capacity)} producing each "
            f"batch between {seconds(1.0 / demand)} steps, so the loop waits {stall} of its time; "
            f"with {count(workers, 'worker')} production overlaps the step for about "
            f"{batch_rate(prediction.steady_batches_per_s)} in steady state (demand {batch_rate(demand)})."
            + (" Production's CPU here was inflated by torch's intra-op threads, which "
               "workers do not run: the workers are taken to pay the calling thread's CPU, "
               "and the interval runs from that to the process's CPU."
               if model.worker_cpu_range_s is not None else "")
            + (f" The main process's {model.pool_threads} intra-op threads are counted as "
               "spin-waiting beside the workers, taking cores from them."
               if model.pool_threads else "")
            + starved_step_words(model)
        )
    cpu_fraction = model.worker_cpu_fraction
    kind = producer_class(model)
    if kind == CPU_BOUND:
        kind = "CPU-bound"  # the capital reads better in a sentence
    beyond_cores = (
        f" (more than the {model.usable_cpus} usable CPUs, which {kind} work tolerates)"
        if workers > model.usable_cpus
        else ""
    )
    if kind == IO_BOUND:
        beyond_cores += " (IO-bound: the gain stops once storage bandwidth is reached)"
    capped = (
        f" (the usable CPUs cap production at {batch_rate(prediction.capacity_batches_per_s)})"
        if prediction.limit == "cpu"
        else ""
    )
    return (
        f"With {count(settings.num_workers, 'worker')} the loader delivers at most "
        f"{batch_rate(capacity)} ({batch_rate(model.per_worker_batches_per_s)} each while busy) against a "
        f"step demand of {batch_rate(demand)}, so the loop waits {stall} of its time; the workers are "
        f"{kind} ({percent(cpu_fraction)} CPU while busy), so {count(workers, 'worker')}"
        f"{beyond_cores} should deliver about {batch_rate(prediction.steady_batches_per_s)} in steady "
        f"state{capped}."
    )


def starved_step_words(model: ThroughputModel) -> str:
    """A sentence on a step measured with its intra-op pool starved
    (:attr:`~pipecheck.analysis.model.ThroughputModel.unstarved_step_s`), which predictions
    do not use (the step's own ceiling bounds them); empty otherwise."""
    if model.unstarved_step_s is None:
        return ""
    step_s = 1.0 / model.demand_batches_per_s
    return (f" The step took {seconds(step_s)} with num_workers=0, its calling thread on a "
            f"core {percent(model.unstarved_step_s / step_s)} of it while the intra-op threads "
            "ran (it waited for a core): beside workers it may run faster, down to that "
            f"thread's CPU time, {seconds(model.unstarved_step_s)}, but the prediction keeps "
            f"the measured step, the most the step is known to allow ({batch_rate(1.0 / step_s)}"
            "); 'pipecheck stress FILE.py:make_loader' (a function that builds your "
            "DataLoader) measures the faster step.")
