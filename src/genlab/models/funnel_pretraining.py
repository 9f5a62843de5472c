"""Funnel-Transformer pretraining models: MLM and ELECTRA generator + discriminator (Dai thesis
§5.2.1, §5.3).

Both take exactly ``FunnelModel``'s constructor arguments (the body: the discriminator for ELECTRA) plus their own,
so one model config serves pretraining and, through ``genlab.models.backbones.adapt``, finetuning.

* ``FunnelForMaskedLM``: body with decoder + MLM head tied to the input embedding; the interface of
  ``genlab.tasks.pretrain.MaskedLMTask`` (``model(ids, types, mask).hidden``, ``model.mlm_logits(h)``).
* ``FunnelElectra``: discriminator body + binary head, and a generator with the same block layout and decoder but
  ``d_model``, ``n_head``, ``d_inner`` times ``width_shrink`` (d_head and d_embed unchanged, so the generator has an
  input projection d_embed -> d_model/4 and its MLM head projects back to d_embed before the tied softmax). The
  generator *uses the discriminator's embedding module* (word embedding and embedding LayerNorm: the same
  parameters). Sampling and the losses are the objective's (``genlab.tasks.funnel_pretrain``).
"""

from __future__ import annotations

import inspect

from torch import Tensor, nn

from genlab.errors import ConfigError
from genlab.models.funnel import (
    FunnelDiscriminatorHead,
    FunnelLayer,
    FunnelMLMHead,
    FunnelModel,
    FunnelOutput,
    init_head,
)


def _body_kwargs(values: dict) -> dict:
    """The ``FunnelModel`` arguments among a wrapper's constructor locals."""
    return {name: values[name] for name in inspect.signature(FunnelModel).parameters}


def _check_full_length(block_sizes: tuple[int, ...], use_decoder: bool, why: str) -> None:
    """Token-level pretraining needs full-length outputs: the decoder, unless there is one block (no pooling: the
    L-layer baselines of the thesis, e.g. L12H768, pretrain without a decoder)."""
    if not use_decoder and len(block_sizes) > 1:
        raise ConfigError(f"model.use_decoder=false with {len(block_sizes)} blocks: {why}, so it needs the decoder "
                          "(the encoder output is shorter than the input); only a 1-block model (no pooling) "
                          "pretrains without one")


class FunnelForMaskedLM(nn.Module):
    """``funnel`` (with decoder) + ``lm_head``; ``mlm_transform=False`` is HF ``FunnelForMaskedLM``'s head."""

    block_classes = (FunnelLayer,)
    forward_methods = ("mlm_logits",)  # entry point besides forward (genlab.parallel gathers the tied embedding)

    def __init__(
        self,
        vocab_size: int,
        block_sizes: tuple[int, ...] = (6, 6, 6),
        block_repeats: tuple[int, ...] | None = None,
        d_model: int = 768,
        n_head: int = 12,
        d_head: int = 64,
        d_inner: int = 3072,
        d_embed: int | None = None,
        use_decoder: bool = True,
        num_decoder_layers: int = 2,
        pooling_type: str = "mean",
        pool_q_only: bool = True,
        separate_cls: bool = True,
        truncate_seq: bool = True,
        attn_type: str = "rel_shift",
        mask_pool: str = "any_real",
        cls_mask: str = "auto",
        dropout: float = 0.1,
        dropatt: float = 0.1,
        dropact: float = 0.0,
        activation: str = "gelu_tanh",
        layer_norm_eps: float = 1e-9,
        init_std: float = 0.02,
        max_position: int = 512,
        mlm_transform: bool = True,
    ) -> None:
        super().__init__()
        _check_full_length(block_sizes, use_decoder, "masked-LM pretraining predicts every position")
        self.funnel = FunnelModel(**_body_kwargs(locals()))
        self.arch = {**self.funnel.arch, "mlm_transform": mlm_transform}
        self.lm_head = FunnelMLMHead(self.funnel.d_model, self.funnel.d_embed, vocab_size, layer_norm_eps,
                                     mlm_transform, activation)
        init_head(self.lm_head, init_std)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                output_attentions: bool = False) -> FunnelOutput:
        return self.funnel(input_ids, token_type_ids, attention_mask, output_attentions)

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """fp32 logits [..., V] of decoder states (gathered at the target positions by the caller)."""
        return self.lm_head(hidden, self.funnel.embeddings.word_embeddings.weight)


def generator_sizes(d_model: int, n_head: int, d_inner: int, width_shrink: float) -> dict[str, int]:
    """Generator ``d_model``, ``n_head``, ``d_inner``: the discriminator's times ``width_shrink`` (ELECTRA's
    smaller generator, e.g. 768/12/3072 -> 192/3/768); they must come out whole."""
    sizes = {}
    for key, value in (("d_model", d_model), ("n_head", n_head), ("d_inner", d_inner)):
        scaled = value * width_shrink
        if abs(scaled - round(scaled)) > 1e-9 or round(scaled) < 1:
            raise ConfigError(f"model.width_shrink={width_shrink} gives a generator {key} of {scaled} (from "
                              f"{value}); choose a factor that keeps d_model, n_head and d_inner whole")
        sizes[key] = int(round(scaled))
    if sizes["d_model"] % 2:
        raise ConfigError(f"model.width_shrink={width_shrink} gives an odd generator d_model {sizes['d_model']}")
    return sizes


class FunnelElectra(nn.Module):
    """ELECTRA pair: ``funnel`` + ``discriminator_predictions`` (what finetuning keeps) and ``generator`` +
    ``generator_lm_head``; ``generator.embeddings is funnel.embeddings``."""

    block_classes = (FunnelLayer,)  # declared here so genlab.parallel finds the generator's layers as well
    # entry points besides forward: genlab.parallel gathers the shared embedding and the heads around each
    forward_methods = ("generator_hidden", "mlm_logits", "discriminator_logits")

    def __init__(
        self,
        vocab_size: int,
        block_sizes: tuple[int, ...] = (6, 6, 6),
        block_repeats: tuple[int, ...] | None = None,
        d_model: int = 768,
        n_head: int = 12,
        d_head: int = 64,
        d_inner: int = 3072,
        d_embed: int | None = None,
        use_decoder: bool = True,
        num_decoder_layers: int = 2,
        pooling_type: str = "mean",
        pool_q_only: bool = True,
        separate_cls: bool = True,
        truncate_seq: bool = True,
        attn_type: str = "rel_shift",
        mask_pool: str = "any_real",
        cls_mask: str = "auto",
        dropout: float = 0.1,
        dropatt: float = 0.1,
        dropact: float = 0.0,
        activation: str = "gelu_tanh",
        layer_norm_eps: float = 1e-9,
        init_std: float = 0.02,
        max_position: int = 512,
        width_shrink: float = 0.25,
        mlm_transform: bool = True,
    ) -> None:
        super().__init__()
        _check_full_length(block_sizes, use_decoder, "ELECTRA scores every position")
        body = _body_kwargs(locals())
        self.funnel = FunnelModel(**body)
        d_embed = self.funnel.d_embed
        gen = generator_sizes(d_model, n_head, d_inner, width_shrink)
        self.generator = FunnelModel(**{**body, **gen, "d_embed": d_embed})
        self.generator.embeddings = self.funnel.embeddings  # shared word embedding and embedding LayerNorm
        self.arch = {**self.funnel.arch, "width_shrink": width_shrink, "mlm_transform": mlm_transform,
                     "generator": gen}
        self.discriminator_predictions = FunnelDiscriminatorHead(self.funnel.d_model, activation)
        self.generator_lm_head = FunnelMLMHead(gen["d_model"], d_embed, vocab_size, layer_norm_eps, mlm_transform,
                                               activation)
        init_head(self.discriminator_predictions, init_std)
        init_head(self.generator_lm_head, init_std)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                output_attentions: bool = False) -> FunnelOutput:
        """The discriminator body (what finetuning keeps)."""
        return self.funnel(input_ids, token_type_ids, attention_mask, output_attentions)

    def generator_hidden(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                         attention_mask: Tensor | None = None) -> Tensor:
        return self.generator(input_ids, token_type_ids, attention_mask).hidden

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """Generator logits (fp32) of generator decoder states, through the shared, tied embedding."""
        return self.generator_lm_head(hidden, self.funnel.embeddings.word_embeddings.weight)

    def discriminator_logits(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                             attention_mask: Tensor | None = None) -> Tensor:
        """[B, T] fp32 logits; sigmoid = P(token is the original)."""
        return self.discriminator_predictions(self.funnel(input_ids, token_type_ids, attention_mask).hidden)

    def generator_only_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """Parameters that only the generator uses (the shared embedding excluded)."""
        shared = {id(p) for p in self.funnel.parameters()}
        return [(f"generator.{n}", p) for n, p in self.generator.named_parameters() if id(p) not in shared] + \
            [(f"generator_lm_head.{n}", p) for n, p in self.generator_lm_head.named_parameters()]


__all__ = ["FunnelElectra", "FunnelForMaskedLM", "generator_sizes"]
