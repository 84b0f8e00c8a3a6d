"""The training loss: cross-entropy with label smoothing, ignoring padding (chapter 9)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..validation import check_choice, check_probability, check_token_ids, checked_by

__all__ = ["label_smoothed_cross_entropy", "LabelSmoothingLoss", "LOSS_CONVENTIONS", "check_loss_inputs"]


LOSS_CONVENTIONS = ("pytorch", "annotated")


def check_loss_inputs(
    logits: Tensor,
    target: Tensor,
    label_smoothing: float = 0.0,
    pad_id: int | None = 0,
    *,
    convention: str = "pytorch",
    reduction: str = "mean",
) -> None:
    """Raise ``ValueError`` naming the argument :func:`label_smoothed_cross_entropy` cannot take."""
    if logits.dim() < 1 or logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits must have shape target.shape + (V,); got logits {tuple(logits.shape)} and target {tuple(target.shape)}"
        )
    check_token_ids(target, "target", ndim=None, what="class ids")
    check_probability(label_smoothing, "label_smoothing")
    check_choice(convention, "convention", LOSS_CONVENTIONS)
    check_choice(reduction, "reduction", ("mean", "sum", "none"))
    n_classes = logits.size(-1)
    if convention == "annotated" and label_smoothing > 0 and n_classes - 1 - (0 if pad_id is None else 1) < 1:
        raise ValueError(f"the annotated convention needs at least 3 classes (with pad); got V={n_classes}")


@checked_by(check_loss_inputs)
def label_smoothed_cross_entropy(
    logits: Tensor,
    target: Tensor,
    label_smoothing: float = 0.0,
    pad_id: int | None = 0,
    *,
    convention: str = "pytorch",
    reduction: str = "mean",
) -> Tensor:
    """Cross-entropy against a label-smoothed target distribution, ignoring padding.

    Each target token ``y`` is replaced by a distribution ``q`` and the loss is
    the cross-entropy ``H(q, p) = -sum_c q_c log p_c`` with
    ``p = softmax(logits)``. Two conventions for ``q`` (``eps = label_smoothing``,
    ``V`` = number of classes):

    * ``"pytorch"`` (default; identical to
      ``F.cross_entropy(..., label_smoothing=eps, ignore_index=pad_id)``):
      ``q = (1 - eps) * onehot(y) + eps / V`` - the smoothing mass is spread
      over *all* ``V`` classes, the target and ``<pad>`` included, so the
      target gets ``1 - eps + eps / V``.
    * ``"annotated"`` (the Annotated Transformer, Rush 2018): the target gets
      exactly ``1 - eps``, ``<pad>`` gets 0, and ``eps / (V - 2)`` goes to each
      other class (``eps / (V - 1)`` when ``pad_id`` is ``None``). The
      Annotated Transformer minimises ``KL(q || p) = H(q, p) - H(q)``; ``H(q)``
      is a constant, so the gradients are the same as here, but its reported
      loss is lower by ``H(q)``.

    With uniform predictions the loss is ``log(V)`` in both conventions (any
    ``q`` summing to one); its minimum, reached at ``p = q``, is the entropy
    ``H(q)`` (0 only without smoothing).

    A ``<pad>`` logit of ``-inf`` (a model that masks ``<pad>`` out of its
    output): the annotated loss and its gradient stay finite, since ``q``
    gives ``<pad>`` nothing; the pytorch loss is ``+inf``, like
    ``F.cross_entropy``, since its ``q`` gives ``<pad>`` ``eps / V``.

    Args:
        logits: unnormalised scores, shape ``(..., V)``, any float dtype
            (computed in float32).
        target: class ids, shape ``(...)`` (the leading shape of ``logits``),
            integer dtype, values in ``[0, V)``.
        label_smoothing: ``eps`` in ``[0, 1)`` (paper: 0.1, section 5.4).
        pad_id: target id to ignore (no loss, not counted), or ``None``.
        convention: ``"pytorch"`` or ``"annotated"`` (see above).
        reduction: ``"mean"`` (average over non-padding positions; 0 if there
            are none), ``"sum"``, or ``"none"`` (per position, 0 at padding).

    Returns:
        a float32 scalar (``"mean"``/``"sum"``) or a tensor of ``target``'s
        shape (``"none"``), in nats.

    Raises:
        ValueError: mismatched shapes, a non-integer ``target``, ``eps`` outside
            ``[0, 1)``, an unknown ``convention``/``reduction``, or the
            annotated convention with fewer than 3 classes.

    Source: Vaswani et al. (2017), section 5.4 ("label smoothing of value
    eps_ls = 0.1"); Szegedy et al. (2016), "Rethinking the Inception
    Architecture", section 7.
    """
    n_classes = logits.size(-1)
    logp = torch.log_softmax(logits.float(), dim=-1)  # (..., V)
    keep = torch.ones_like(target, dtype=torch.bool) if pad_id is None else target != pad_id  # (...): not padding
    safe_target = target.masked_fill(~keep, 0).long()
    logp_target = logp.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)  # (...): log p of the right class
    nll = -logp_target
    if label_smoothing == 0.0:
        per_token = nll
    elif convention == "pytorch":
        per_token = (1.0 - label_smoothing) * nll + label_smoothing * (-logp.mean(dim=-1))
    else:
        others = n_classes - 1 - (0 if pad_id is None else 1)  # classes that share eps (>= 1: checked)
        # Sum of log p over the classes that get eps / others: all but <pad> and the target. <pad> is
        # summed around, not subtracted: a model that never predicts it has log p = -inf there, and
        # (-inf) - (-inf) would be NaN although q gives <pad> nothing. (A target at -inf stays in
        # the sum: its loss is +inf.)
        if pad_id is None:
            rest = logp.sum(dim=-1)
        else:
            rest = logp[..., :pad_id].sum(dim=-1) + logp[..., pad_id + 1 :].sum(dim=-1)
        rest = rest - logp_target.masked_fill(torch.isinf(logp_target), 0.0)
        per_token = (1.0 - label_smoothing) * nll + label_smoothing * (-rest / others)
    per_token = per_token.masked_fill(~keep, 0.0)  # (...)
    if reduction == "none":
        return per_token
    total = per_token.sum()
    if reduction == "sum":
        return total
    return total / keep.sum().clamp_min(1)


class LabelSmoothingLoss(nn.Module):
    """Module form of :func:`label_smoothed_cross_entropy` (same arguments, same shapes).

    Args:
        label_smoothing: ``eps`` in ``[0, 1)``.
        pad_id: the ignored target id, or ``None``.
        convention: ``"pytorch"`` (eps spread over all classes) or
            ``"annotated"`` (over all but the target and ``<pad>``).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    ``forward(logits (..., V), target (...))`` returns the loss in nats.

    Source: Vaswani et al. (2017), section 5.4.
    """

    def __init__(self, label_smoothing: float = 0.1, pad_id: int | None = 0, convention: str = "pytorch", reduction: str = "mean") -> None:
        super().__init__()
        check_choice(convention, "convention", LOSS_CONVENTIONS)
        check_probability(label_smoothing, "label_smoothing")
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id
        self.convention = convention
        self.reduction = reduction

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return label_smoothed_cross_entropy(
            logits, target, self.label_smoothing, self.pad_id, convention=self.convention, reduction=self.reduction
        )

    def extra_repr(self) -> str:
        return f"label_smoothing={self.label_smoothing}, pad_id={self.pad_id}, convention={self.convention!r}"
