"""`lumos serve` as a real process on a loopback port, driven by the official `openai`
client and raw HTTP: a tiny random Llama whose texts are checked against the same model's
`Generator` in this process (greedy), streaming and not, 8 concurrent clients batched
3 at a time (each client's text still the generator's for its prompt alone), stop
strings, bad requests answered with a 4xx while the server goes on, and a clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from lumos.generate import Generator, render_chat  # noqa: E402
from lumos.models import llama  # noqa: E402

TEMPLATE = "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}w3"
CONTEXT = 40


def tiny_folder(path):
    """A Hugging Face folder: a random Llama (vocab 64) and a word-level tokenizer whose
    words are w0..w63 (decoded joined by spaces), with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tests.models.test_llama import hf_model

    hf_model(tie=True, seed=3).save_pretrained(path, safe_serialization=True)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(64)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tiny_folder(tmp_path_factory.mktemp("tiny"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "lumos.cli", "serve", str(folder), "--name", "tiny",
         "--runtime", "reference", "--context", str(CONTEXT), "--max-prefill", "8",
         "--slots", "3",  # (fewer than the 8 concurrent clients: some wait, then join)
         "--port", "0"], stderr=subprocess.PIPE, text=True,
        env={**os.environ, "LUMOS_ARTIFACTS": "off"})
    url, lines = None, []
    deadline = time.monotonic() + 300
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if " at http://" in line:
            url = line.split(" at ", 1)[1].split()[0].removesuffix("/v1")
    if url is None:
        proc.kill()
        pytest.fail("the server did not start:\n" + "".join(lines))
    drain = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    drain.start()  # keeps the pipe from filling
    pre = llama.load(folder, max_context=CONTEXT)
    yield url, (proc, drain, lines), pre, Generator(pre.model, pre.state, max_prefill=8)
    if proc.poll() is None:
        proc.kill()


def expected(pre, gen: Generator, ids: list[int], max_tokens: int) -> tuple[str, str]:
    """(text, finish_reason) of greedy generation in this process."""
    gen.reset()
    out = list(gen.generate(ids, max_tokens, stop={pre.model.config.eos_token_id}))
    finish = "length" if len(out) == max_tokens or gen.pos >= CONTEXT else "stop"
    return pre.tokenizer.decode(out, skip_special_tokens=True), finish


def post(url: str, path: str, body: bytes | dict) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_health_and_models(server):
    url, *_ = server
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        assert json.loads(r.read()) == {"status": "ok"}
    client = openai.OpenAI(base_url=url + "/v1", api_key="none")
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_chat_streamed_and_not_equal_the_generator(server):
    url, _, pre, gen = server
    client = openai.OpenAI(base_url=url + "/v1", api_key="none")
    messages = [{"role": "w1", "content": "w5 w9 w30"}]
    ids = pre.tokenizer.encode(render_chat(TEMPLATE, messages), add_special_tokens=False).ids
    want, finish = expected(pre, gen, ids, 12)
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12,
                                            temperature=0, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want
    assert chunks[-1].choices[0].finish_reason == finish
    whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12,
                                           temperature=0)
    assert whole.choices[0].message.content == want
    assert whole.choices[0].finish_reason == finish
    assert whole.usage.prompt_tokens == len(ids)


def test_eight_concurrent_clients_all_complete(server):
    url, _, pre, gen = server
    prompts = [" ".join(f"w{(7 * i + j) % 60 + 4}" for j in range(3 + i)) for i in range(8)]
    want = [expected(pre, gen, pre.tokenizer.encode(p).ids, 6)[0] for p in prompts]

    def one(prompt: str) -> str:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none")
        chunks = client.completions.create(model="tiny", prompt=prompt, max_tokens=6,
                                           temperature=0, stream=True)
        return "".join(c.choices[0].text for c in chunks)

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, prompts)) == want


def test_stop_strings_cut_the_text(server):
    url, _, pre, gen = server
    ids = pre.tokenizer.encode("w10 w11").ids
    want, _ = expected(pre, gen, ids, 10)
    words = want.split()
    assert len(words) >= 3, want
    stop = words[2]
    code, r = post(url, "/v1/completions", {"model": "tiny", "prompt": "w10 w11",
                                            "max_tokens": 10, "temperature": 0,
                                            "stop": [stop]})
    assert code == 200 and r["choices"][0]["finish_reason"] == "stop"
    assert r["choices"][0]["text"] == want[:want.find(stop)]


def test_bad_requests_get_a_4xx_and_the_server_goes_on(server):
    url, _, pre, gen = server
    bad = [(b"{not json", 400, None), ({"model": "gpt-9", "prompt": "w1"}, 404, "model"),
           ({"model": "tiny", "prompt": 5}, 400, "prompt"),
           ({"model": "tiny", "prompt": "w1", "temperature": 7}, 400, "temperature"),
           ({"model": "tiny", "prompt": "w1", "max_tokens": 0}, 400, "max_tokens"),
           ({"model": "tiny", "prompt": " ".join(["w4"] * CONTEXT)}, 400, "prompt"),
           ({"model": "tiny", "messages": "w1"}, 400, "messages")]
    for body, status, param in bad:
        chat = isinstance(body, dict) and "messages" in body
        code, r = post(url, "/v1/chat/completions" if chat else "/v1/completions", body)
        assert code == status and r["error"]["param"] == param, (body, r)
        assert r["error"]["message"]
    code, r = post(url, "/v1/completions", {"model": "tiny", "prompt": "w4 w5",
                                            "max_tokens": 3, "temperature": 0})
    assert code == 200
    assert r["choices"][0]["text"] == expected(pre, gen, [4, 5], 3)[0]


def test_the_server_stops_cleanly(server):
    """SIGTERM: in-flight requests finish, then the process ends by the signal (uvicorn
    re-raises it after its shutdown), with no traceback."""
    _, (proc, drain, lines), *_ = server
    proc.terminate()
    assert proc.wait(timeout=30) == -signal.SIGTERM
    drain.join(timeout=10)
    assert not any("Traceback" in line for line in lines), "".join(lines)


class _Stop(Exception):
    pass


def test_a_client_told_the_url_is_not_refused():
    """`ready` is called once the socket listens: a connection made at once is queued
    until the server runs (it was refused in the moment before uvicorn listened)."""
    import socket

    from lumos import serve

    class NoEngine:
        def close(self) -> None:
            pass

    connected = []

    def ready(url: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5):
            connected.append(url)
        raise _Stop

    with pytest.raises(_Stop):
        serve.serve(NoEngine(), "127.0.0.1", 0, ready)
    assert connected
