"""flashkit.Model hardening: thread counts bounded with a clear error (once a SIGSEGV inside OpenMP), generate()
never reserving memory by max_new_tokens, the thread-safety contract (threads generating on their own sessions of
one Model; closing a Model or Session while another thread uses it), and the text size cap."""
import os
import resource
import threading

import numpy as np
import pytest

import flashkit

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
LLAMA = os.path.join(ROOT, "tests", "data", "models", "tiny-llama")
TINY_TOK = os.path.join(ROOT, "tests", "data", "tokenizers", "tiny_bytelevel")


def test_threads_are_bounded():
    assert 1 <= flashkit.max_threads() <= 1024
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^threads: expected 0 \(the default\) or 1\.\.\d+"):
        flashkit.Model(LLAMA, threads=100000)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^num_threads: expected 1\.\.%d" % flashkit.max_threads()):
        flashkit.set_num_threads(flashkit.max_threads() + 1)
    with flashkit.Model(LLAMA, threads=flashkit.max_threads()) as m:
        assert len(m.generate([1, 2], max_new_tokens=2)) == 2


def test_generate_does_not_reserve_by_max_new_tokens():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with flashkit.Model(LLAMA) as m:
        ids = m.generate([1], max_new_tokens=2**31 - 1, temperature=0.0)
        assert 1 <= len(ids) <= m.max_context  # ends at an eos id or when the context is full
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 1024, "generate() grew the process by %.0f MiB" % grown_mib


def test_sessions_of_one_model_on_several_threads():
    """Each thread drives its own session of one shared Model; the library serializes their calls, so every
    thread gets exactly what it gets alone."""
    with flashkit.Model(LLAMA) as m:
        prompts = [[1, 5 + t, 9, 2 * t + 3] for t in range(6)]
        alone = []
        for p in prompts:
            with m.session() as s:
                rows = [s.prefill(p)]
                for _ in range(5):
                    rows.append(s.decode(int(rows[-1].argmax())))
                alone.append(np.stack(rows))
        got = [None] * len(prompts)
        errors = []

        def work(t):
            try:
                with m.session() as s:
                    rows = [s.prefill(prompts[t])]
                    for _ in range(5):
                        rows.append(s.decode(int(rows[-1].argmax())))
                    got[t] = np.stack(rows)
                    assert m.generate(prompts[t], max_new_tokens=3) == m.generate(prompts[t], max_new_tokens=3)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(len(prompts))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        for t in range(len(prompts)):
            np.testing.assert_array_equal(got[t], alone[t])


def test_closing_while_another_thread_generates():
    """Model.close() / Session.close() while a call runs elsewhere: that call finishes (the native object is freed
    when it returns) and later calls raise a clean InvalidArgumentError -- never a crash."""
    for _ in range(3):
        m = flashkit.Model(LLAMA)
        s = m.session()
        started = threading.Event()
        results, errors = [], []

        def work():
            started.set()
            try:
                for _ in range(20):
                    results.append(m.generate([1, 2, 3], max_new_tokens=8))
                    results.append(s.decode(4) if s.position < s.max_context else None)
            except flashkit.InvalidArgumentError as e:
                errors.append(str(e))

        th = threading.Thread(target=work)
        th.start()
        started.wait()
        m.close()
        th.join()
        assert all(e.startswith(("model: this Model is closed", "session: this Session is closed")) for e in errors), errors
        # The session keeps the model's weights alive after Model.close().
        assert s.decode(5).shape == (m.vocab_size,)
        s.close()
        with pytest.raises(flashkit.InvalidArgumentError, match="closed"):
            s.decode(1)


def test_text_input_is_capped():
    with flashkit.Tokenizer(TINY_TOK) as t:
        with pytest.raises(flashkit.InvalidArgumentError, match=r"^text: .*64 MiB"):
            t.encode("a" * ((64 << 20) + 1))
