"""HFTA-style fused operators for a BERT sequence classifier, written by hand for ``bench_fused``'s comparison: the
other way to train K members as one (Wang et al., *Horizontally Fused Training Array*, MLSys 2021), against the vmap
mechanism istar-tune uses (:class:`istar_tune.training.fused.FusedModel`).

Every operator of the encoder is one batched call over the members' stacked weights — ``baddbmm`` for each linear
layer, a gather for the embeddings, one ``layer_norm`` over all members then each member's own scale and shift, one
attention product over (K, B, H, T, T), one dropout draw for all members — reading the same (K, ...) stacks a
:class:`~istar_tune.training.fused.FusedModel` keeps, so the members' optimizers, clipping and update are the vmap
side's. What it costs that vmap does not: this file, which knows BERT's parameter names and layer order (a second
encoder family needs one of its own), and the dropout draws, one for all members, so a member's masks are not the
ones its run alone draws (vmap's members each draw from their own generator, bit for bit their runs').
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from istar_tune.training.fused import FusedModel


class HftaBert:
    """K BERT sequence classifiers (one config) as one model of hand-fused operators over ``fused``'s stacks."""

    def __init__(self, fused: FusedModel):
        self.fused, self.config = fused, fused.models[0].config
        # A bundle of one keeps its own parameters (FusedModel stacks from two): a view with a member axis of 1.
        self.params = fused.stacked or {name: params[0].unsqueeze(0) for name, params in fused.params.items()}
        self.members = len(fused)
        self.training = True

    def _dropout(self, x: torch.Tensor, p: float) -> torch.Tensor:
        return F.dropout(x, p, self.training)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """(K, ..., in) → (K, ..., out): every member's linear layer as one ``baddbmm``."""
        weight, bias = self.params[f"{name}.weight"], self.params[f"{name}.bias"]
        flat = x.reshape(self.members, -1, x.shape[-1])
        out = torch.baddbmm(bias.unsqueeze(1), flat, weight.transpose(1, 2))
        return out.reshape(*x.shape[:-1], weight.shape[1])

    def _layer_norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """One normalisation of every member's tokens, then each member's own scale and shift."""
        shape = (self.members,) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        normed = F.layer_norm(x, x.shape[-1:], eps=self.config.layer_norm_eps)
        return torch.addcmul(self.params[f"{name}.bias"].view(shape), normed, self.params[f"{name}.weight"].view(shape))

    def _attention(self, h: torch.Tensor, prefix: str, mask: torch.Tensor) -> torch.Tensor:
        k_, b, t, d = h.shape
        heads = self.config.num_attention_heads
        size = d // heads

        def split(x):  # (K, B, T, d) → (K, B, H, T, d/H)
            return x.view(k_, b, t, heads, size).transpose(2, 3)

        q, k, v = (split(self._linear(h, f"{prefix}attention.self.{which}")) for which in ("query", "key", "value"))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(size) + mask
        probs = self._dropout(torch.softmax(scores, dim=-1), self.config.attention_probs_dropout_prob)
        context = torch.matmul(probs, v).transpose(2, 3).reshape(k_, b, t, d)
        out = self._dropout(self._linear(context, f"{prefix}attention.output.dense"), self.config.hidden_dropout_prob)
        return self._layer_norm(out + h, f"{prefix}attention.output.LayerNorm")

    def _layer(self, h: torch.Tensor, index: int, mask: torch.Tensor) -> torch.Tensor:
        prefix = f"bert.encoder.layer.{index}."
        attended = self._attention(h, prefix, mask)
        inner = F.gelu(self._linear(attended, f"{prefix}intermediate.dense"))
        out = self._dropout(self._linear(inner, f"{prefix}output.dense"), self.config.hidden_dropout_prob)
        return self._layer_norm(out + attended, f"{prefix}output.LayerNorm")

    def __call__(self, batch: dict[str, torch.Tensor], hidden_states: bool = True,
                 lengths=None) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Task losses (K,) and the embedding output and every layer's (each (K, B, T, d)) for one batch every member
        reads: what :class:`~istar_tune.training.fused.FusedModel` returns."""
        if self.fused.stacked:
            self.fused._forget_zeroed()  # rows whose member's optimizer set its gradients to None start from zero
            self.params = self.fused.stacked
        else:
            self.params = {name: params[0].unsqueeze(0) for name, params in self.fused.params.items()}
        ids, attention = batch["input_ids"], batch["attention_mask"]
        types = batch.get("token_type_ids", torch.zeros_like(ids))
        p, t = self.params, ids.shape[1]
        embedded = (p["bert.embeddings.word_embeddings.weight"][:, ids]
                    + p["bert.embeddings.position_embeddings.weight"][:, None, :t]
                    + p["bert.embeddings.token_type_embeddings.weight"][:, types])
        h = self._dropout(self._layer_norm(embedded, "bert.embeddings.LayerNorm"), self.config.hidden_dropout_prob)
        mask = (1.0 - attention[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min  # (B, 1, 1, T)
        states = [h]
        for index in range(self.config.num_hidden_layers):
            h = self._layer(h, index, mask)
            states.append(h)
        pooled = torch.tanh(self._linear(h[:, :, 0], "bert.pooler.dense"))
        logits = self._linear(self._dropout(pooled, self.config.hidden_dropout_prob), "classifier")
        labels = batch["labels"].repeat(self.members)
        losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, reduction="none")
        return losses.view(self.members, -1).mean(dim=1), tuple(states) if hidden_states else ()

    # What fused_losses and fused_forward_backward read of a FusedModel.
    def share_gradients(self) -> None:
        self.fused.share_gradients()

    @property
    def models(self):
        return self.fused.models
