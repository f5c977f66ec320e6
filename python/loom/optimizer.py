# SPDX-License-Identifier: Apache-2.0
"""loom.Optimizer: wraps a torch.optim optimizer; the swarm decides when it steps."""
import logging
import re
import time
import warnings
import weakref

import torch

from . import _native
from ._options import options_text

_log = logging.getLogger("loom")

# The optimizers whose state Loom's snapshots carry in the layout `loom
# train` uses (trainer.optimizer), so Python and C++ peers share states.
# Others train too, their statistics their own.
_KINDS = ((torch.optim.AdamW, "adamw"), (torch.optim.Adam, "adam"), (torch.optim.SGD, "sgd"))
_PEERS = re.compile(r"(\d+) peers?\b")


def _kind_of(optimizer):
    """loom train's name for the optimizer, or None for another one."""
    for cls, kind in _KINDS:
        if type(optimizer) is cls:
            return kind
    return None


def _loss_value(loss):
    """A step's loss as a float for the swarm's records, or None."""
    if loss is None:
        return None
    if torch.is_tensor(loss):
        if loss.numel() != 1:
            raise ValueError(f"loss has {loss.numel()} elements: pass the step's scalar loss")
        return float(loss.detach().item())
    if isinstance(loss, bool) or not isinstance(loss, (int, float)):
        raise ValueError(f"loss = {loss!r}: it must be a number or a one-element tensor")
    return float(loss)


def _forward_logs():
    for level, text in _native.drain_logs():
        _log.log(level, "%s", text)


def _close(session_ref, strategy):
    session = session_ref()
    if session is not None:
        try:
            session.teardown()
            _log.info("strategy '%s' torn down: this process left the swarm or job", strategy)
        finally:
            _forward_logs()


class Optimizer:
    """Trains `optimizer`'s parameters with a swarm (Loom's `collab` strategy).

    `optimizer` is any torch.optim optimizer. Those of SGD (dampening 0),
    Adam and AdamW (amsgrad off) live in Loom's tensors and travel with the
    state (snapshots, state averaging, a joiner's download), in `loom
    train`'s layout; any other keeps its statistics to itself (a joiner
    starts them afresh).

    step() adds this step's gradients to the swarm's count of samples; once
    the swarm reaches target_batch_size, the peers average their gradients
    and `optimizer` steps once on the average. Between those rounds step()
    only accumulates (the gradients stay in the parameters' .grad, which
    zero_grad() leaves alone until the optimizer has stepped).

    Keywords other than these are the strategy plugin's options under their
    own names (`loom plugins info collab`): run_id, target_batch_size,
    initial_peers, listen, min_group_size, averaging_timeout, swarm_key...
    A bad value raises ValueError with the plugin's message.

    model: names the parameters (and lends its buffers, BatchNorm's
        statistics) as `loom train` names a TorchScript model's, so that
        Python and `loom train` peers training the same model can join one
        swarm. Without it the parameters are named by their place.
    batch_size_per_step: the samples one step() of this process trains on.
    scheduler: a torch.optim.lr_scheduler over `optimizer`; it steps once
        per swarm epoch.
    strategy: the strategy plugin ("collab"); plugin_path: extra folders to
        find plugins in; collective_options: the options of the strategy's
        collective plugin (e.g. {"transports": "tcp"} for ucx).
    task: what is trained, as peers compare it ("torchscript" matches a
        `loom train` peer of the torchscript task).
    max_steps: the last epoch, when known (the swarm averages the state there).
    log_every: epochs between progress lines in the `loom` logger (0: none).
    """

    def __init__(self, optimizer, *, batch_size_per_step, model=None, scheduler=None, strategy="collab",
                 plugin_path=None, collective_options=None, task="torchscript", max_steps=-1, log_every=10,
                 **options):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
        kind = _kind_of(optimizer)
        other = ""
        if kind is None:
            # Any other torch.optim optimizer trains too; Loom averages and
            # sends its parameters and buffers, not its statistics.
            other = f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"
            _log.warning("%s keeps its statistics to itself: Loom's snapshots, state averaging and a joiner's "
                         "download carry only the parameters and buffers (a peer that joins or loads the swarm's "
                         "state starts them afresh); SGD, Adam and AdamW share theirs", other)
        if isinstance(batch_size_per_step, bool) or not isinstance(batch_size_per_step, int) or batch_size_per_step < 1:
            raise ValueError(f"batch_size_per_step = {batch_size_per_step!r}: it must be an int of at least 1 "
                             f"(the samples one step() trains on in this process)")
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.batch_size_per_step = batch_size_per_step
        self.log_every = log_every
        self._samples = 0  # since the last progress line
        names, params = self._named_params(optimizer, model)
        named_buffers = list(model.named_buffers()) if model is not None else []
        buffer_names, buffers = [n for n, _ in named_buffers], [b for _, b in named_buffers]
        momentum = 0.0
        for group in optimizer.param_groups:
            if kind == "sgd":
                momentum = float(group.get("momentum", 0.0))
                if group.get("dampening", 0) != 0:
                    raise ValueError("loom.Optimizer: SGD with dampening != 0 is not supported (valid: dampening=0)")
            elif kind in ("adam", "adamw") and group.get("amsgrad", False):
                raise ValueError(f"loom.Optimizer: {kind} with amsgrad=True is not supported (valid: amsgrad=False)")
        text = options_text(options)
        collective_text = options_text(collective_options)
        _native.capture_logs()
        try:
            self._session = _native.Session(
                strategy=strategy, options=text, collective=text.get("collective", "ucx"),
                collective_options=collective_text, plugin_path=[str(p) for p in (plugin_path or [])], task=task,
                param_names=names, params=params, buffer_names=buffer_names, buffers=buffers,
                optimizer=kind or "sgd", momentum=momentum, batch_size=batch_size_per_step, max_steps=max_steps,
                other_optimizer=other)
            if kind is not None:
                self._share_state(kind, params)
            self._session.setup()
        finally:
            _forward_logs()
        # Also runs at exit (finalize's atexit), and when a SIGINT ends the loop.
        self._closer = weakref.finalize(self, _close, weakref.ref(self._session), strategy)
        self._applied = True  # the gradients may be zeroed
        self._logged_epoch = self._follow_epoch()  # a joiner starts at the swarm's epoch: so does its schedule
        self._logged_at = time.monotonic()

    @staticmethod
    def _named_params(optimizer, model):
        in_optimizer = [p for group in optimizer.param_groups for p in group["params"]]
        if model is None:
            return [f"param{i}" for i in range(len(in_optimizer))], in_optimizer
        wanted = {id(p) for p in in_optimizer}
        named = [(n, p) for n, p in model.named_parameters() if id(p) in wanted]
        if len(named) != len(in_optimizer):
            raise ValueError(f"the optimizer holds {len(in_optimizer)} parameters, of which {len(named)} are the "
                             f"model's; pass the model whose parameters the optimizer trains")
        return [n for n, _ in named], [p for _, p in named]

    def _share_state(self, kind, params):
        # Python's optimizer keeps its statistics in Loom's tensors, so that
        # snapshots, state averaging and a joiner's download see them.
        statistics = self._session.optimizer_statistics()
        counters = []
        for p, stats in zip(params, statistics):
            state = self.optimizer.state[p]
            keys = ["exp_avg", "exp_avg_sq"] if kind != "sgd" else (["momentum_buffer"] if stats else [])
            for key, tensor in zip(keys, stats):
                if torch.is_tensor(state.get(key)):
                    tensor.copy_(state[key])
                state[key] = tensor
            if kind != "sgd":
                step = state.get("step", 0)
                counter = torch.tensor(float(step.item() if torch.is_tensor(step) else step))
                state["step"] = counter
                counters.append(counter)
        if counters:
            self._session.share_step_counters(counters)

    def step(self, closure=None, batch_size=None, loss=None):
        """Counts this step's samples (batch_size, default batch_size_per_step)
        toward the swarm's target; steps the optimizer when the swarm averaged.
        loss (a number or a one-element tensor; the closure's result when a
        closure is given) is this step's training loss: a swarm peer publishes
        it, so that `loom swarm status` shows the swarm's loss."""
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        samples = self.batch_size_per_step if batch_size is None else batch_size
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"batch_size = {samples!r}: it must be an int of at least 1")
        value = _loss_value(loss)
        try:
            apply = self._session.after_backward(samples, value)
            if apply:
                if self._session.grads_finite():
                    self.optimizer.step()
                else:
                    _log.warning("the averaged gradients are not finite: this step is skipped")
                self._session.after_optimizer_step()
        finally:
            _forward_logs()
        self._applied = apply
        self._samples += samples
        self._progress(self._follow_epoch())
        return loss

    def _progress(self, epoch):
        if not self.log_every or epoch // self.log_every <= self._logged_epoch // self.log_every:
            return
        now = time.monotonic()
        rate = self._samples / max(1e-9, now - self._logged_at)
        _log.info("epoch %d: %.0f samples/s here  | %s", epoch, rate, self._session.status_line())
        self._logged_epoch, self._logged_at, self._samples = epoch, now, 0

    def _follow_epoch(self):
        """The swarm's epoch, which the scheduler's count (last_epoch)
        follows: it jumps when this peer loads the swarm's state, as `loom
        train`'s schedule follows its global step."""
        epoch = self._session.global_step()
        if self.scheduler is not None and self.scheduler.last_epoch < epoch:
            with warnings.catch_warnings():
                # A joiner's schedule moves before its optimizer's first step.
                warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()` before")
                while self.scheduler.last_epoch < epoch:
                    self.scheduler.step()
        return epoch

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients once the optimizer has stepped on them; until
        then they accumulate toward the swarm's round. They are never set to
        None: Loom lends their buffers to the swarm."""
        if self._applied:
            self._session.zero_grads()

    def load_state_from_peers(self):
        """Loads the newest state the other peers hold, now (a download from a
        donor, checked as a joiner's is), and moves to its epoch. True when a
        state was loaded; False, with a warning saying why, when none could
        be (this peer's state is then unchanged). A strategy with nothing to
        load (single, ddp) raises ValueError."""
        try:
            loaded, why = self._session.load_state_from_peers()
        finally:
            _forward_logs()
        if not loaded:
            _log.warning("load_state_from_peers: %s", why)
            return False
        self._applied = True  # the strategy zeroed the gradients: the new epoch starts afresh
        self._follow_epoch()
        return True

    @property
    def local_epoch(self):
        """The swarm's epoch this peer is at (optimizer steps taken together)."""
        return self._session.global_step()

    @property
    def num_peers(self):
        """Peers this one last saw in the swarm (from the strategy's status)."""
        match = _PEERS.search(self._session.status_line())
        return int(match.group(1)) if match else 1

    @property
    def status(self):
        """The strategy's one-line status ("[3 peers, epoch 12, 96/256 samples]")."""
        return self._session.status_line()

    @property
    def should_stop(self):
        return self._session.should_stop()

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def state_dict(self):
        return self.optimizer.state_dict()

    def shutdown(self):
        """Leaves the swarm (the peer says goodbye). Also done at exit."""
        self._closer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
        return False
