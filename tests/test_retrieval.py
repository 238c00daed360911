"""The retrieval encoder gives the same bytes however its texts are batched."""


def test_encode_memo_gives_the_bytes_of_a_fresh_encoder():
    """The memo (texts seen before) and batching change no byte: a fresh encoder on one text gives
    the bytes a warm one gives inside a batch."""
    import numpy as np

    from casu_dataset.sounds.retrieval import Embedder

    texts = ["A dog barks twice.", "Rain on a tin roof.", "A dog barks twice.", "Church bells ring."]
    warm = Embedder(disk_cache=False)  # the model, not the query-embedding cache
    batch = warm.encode(texts)
    again = warm.encode(texts[::-1])
    for i, t in enumerate(texts):
        one = Embedder(disk_cache=False).encode([t])[0]
        assert batch[i].tobytes() == one.tobytes()
        assert again[len(texts) - 1 - i].tobytes() == one.tobytes()
    assert batch.dtype == np.float32 and batch.shape == (4, warm.dim)
