"""examples/seed003_encoder_decoder.py runs: the seed's example, its four bugs reproduced and shown wrong (the
script asserts each), and the stack equal to torch.nn.Transformer."""

from __future__ import annotations


def test_walkthrough_reproduces_the_seed_bugs(run_example, expect_lines):
    out, _ = run_example("seed003_encoder_decoder.py")
    expect_lines(out, [
        "output                                       (B, T, C) = (2, 3, 512)  float32",
        "FeedForward activations: the seed's sigmoid, tanh, relu, gelu, leaky_relu, elu",
        "derived src_key_padding_mask                 (B, S) = (2, 5)  bool",
        "the padded sentence's logits equal those of the same sentence without padding",
        "the seed's layer: cross_attn gets no gradient and doubling its weights changes nothing",
        "the seed's stack equals its last layer alone (layer 0 gets no gradient)",
        "seed: the encoder's first position ignores the last source word; attnkit: it sees it",
        "target word 0 sees source word 0 only",
        "seed, query 0: weights [0.0, nan, nan], output [nan, nan, nan, nan]",
        "attnkit, query 0: weights [0.0, 0.0, 0.0], output [0.0, 0.0, 0.0, 0.0]",
        "attnkit EncoderDecoder output                (B, T, C) = (2, 4, 32)  float32",
    ])
    difference = float(out.split("equal: max |difference| = ")[1].split()[0])
    assert difference < 5e-5
