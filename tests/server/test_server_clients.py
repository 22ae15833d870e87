"""`magi2 serve` against real clients: the official `openai` Python package
(videos.create / retrieve / download_content / list, installed by
scripts/setup.sh into .deps/py) and curl, on the built-in tiny model.
Loopback only (127.0.0.1, a free port the server picks), bounded waits, and
every server is stopped by the test. Clip sizes are small (a fraction of a
second at 32x32) so the 100+ jobs here take a minute or two on 2 cores.

Usage: python3 test_server_clients.py MAGI2_BINARY [unittest args]
"""
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings
import zlib

MAGI2 = None
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, ".deps", "py"))
try:
    import openai  # noqa: E402
except ImportError:  # pragma: no cover
    openai = None

# One small clip: 0.2 s -> 1 latent frame, 32x32 pixels, 2 steps.
SMALL = {"seconds": "0.2", "size": "32x32"}
SMALL_STEPS = 2
DEADLINE_S = 300  # upper bound on any wait: a stuck server fails instead of hanging


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def tiny_png(w=32, h=32):
    """A valid RGB PNG (gradient) written with zlib only."""
    raw = b"".join(b"\x00" + b"".join(bytes((x * 8 % 256, y * 8 % 256, 128)) for x in range(w)) for y in range(h))

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


class Server:
    """One `magi2 serve` process on a free loopback port."""

    def __init__(self, cache, *extra):
        self.out_dir = tempfile.mkdtemp(prefix="magi2_serve_out_")
        env = dict(os.environ, MAGI2_CACHE_DIR=cache)
        self.proc = subprocess.Popen(
            [MAGI2, "serve", "--model", "builtin:tiny", "--port", "0", "--threads", "1", "--output-dir",
             self.out_dir, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        line = self.proc.stdout.readline()  # "magi2 serve: MODEL on http://127.0.0.1:PORT (...)"
        if "http://" not in line:
            self.proc.kill()
            raise RuntimeError("server did not start: " + line + self.proc.stderr.read())
        self.port = int(line.split("http://127.0.0.1:")[1].split()[0])
        self.base = "http://127.0.0.1:%d" % self.port
        # Drain stderr (progress lines) so the server never blocks on a full pipe.
        self.stderr = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode

    def curl(self, *args, data=None):
        """Runs curl (`data`: the request body, sent on stdin); returns (HTTP status, body bytes)."""
        if data is not None:
            args += ("--data-binary", "@-")
        r = subprocess.run(["curl", "-s", "-S", "--max-time", str(DEADLINE_S), "-o", "-", "-w", "\n%{http_code}",
                            *args], input=data, capture_output=True, check=False)
        body, _, code = r.stdout.rpartition(b"\n")
        return int(code or 0), body

    def post_json(self, path, obj, *headers):
        hs = []
        for h in headers:
            hs += ["-H", h]
        body = obj if isinstance(obj, str) else json.dumps(obj)
        return self.curl("-X", "POST", self.base + path, "-H", "Content-Type: application/json", *hs,
                         data=body.encode())

    def get_json(self, path, *headers):
        hs = []
        for h in headers:
            hs += ["-H", h]
        code, body = self.curl(self.base + path, *hs)
        return code, json.loads(body) if body else None

    def wait_status(self, vid, want, headers=()):
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            code, v = self.get_json("/v1/videos/" + vid, *headers)
            if code == 200 and v["status"] in want:
                return v
            time.sleep(0.05)
        raise AssertionError("video %s never reached %s" % (vid, want))

    def rss(self):
        code, body = self.curl(self.base + "/metrics")
        for line in body.decode().splitlines():
            if line.startswith("magi2_process_resident_memory_bytes "):
                return int(line.split()[1])
        raise AssertionError("no RSS in /metrics")

    def leftovers(self):
        """Files in the output folder that are not finished outputs (temp files)."""
        return [f for f in os.listdir(self.out_dir) if f != "uploads" and not f.endswith((".mp4", ".png"))]


def cli_mp4(cache, seed, out):
    """The same small clip made by `magi2 generate` (the reference digest)."""
    subprocess.run([MAGI2, "generate", "--model", "builtin:tiny", "--prompt", "a red fox", "--seconds",
                    SMALL["seconds"], "--width", "32", "--height", "32", "--num-inference-steps", str(SMALL_STEPS),
                    "--seed", str(seed), "--threads", "1", "-o", out], check=True, capture_output=True,
                   env=dict(os.environ, MAGI2_CACHE_DIR=cache))
    with open(out, "rb") as f:
        return f.read()


class ServerTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cache = tempfile.mkdtemp(prefix="magi2_serve_cache_")
        cls.srv = Server(cls.cache, "--max-queue", "64", "--keep", "500", "--max-body-mb", "1")
        cls.client = openai.OpenAI(api_key="unused", base_url=cls.srv.base + "/v1", max_retries=0,
                                   timeout=DEADLINE_S)

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        shutil.rmtree(cls.cache, ignore_errors=True)
        shutil.rmtree(cls.srv.out_dir, ignore_errors=True)
        assert rc == 0, "server exit status %s" % rc

    def create(self, seed=42, steps=SMALL_STEPS, **extra):
        body = {"num_inference_steps": steps, "seed": seed}
        body.update(extra)
        return self.client.videos.create(prompt="a red fox", **SMALL, extra_body=body)

    def test_openai_create_retrieve_download_list(self):
        v = self.create(seed=3)
        self.assertEqual(v.object, "video")
        self.assertIn(v.status, ("queued", "in_progress"))
        v = self.srv.wait_status(v.id, ("completed", "failed"))
        self.assertEqual(v["status"], "completed", v)
        self.assertEqual(v["progress"], 100)
        self.assertEqual(self.client.videos.retrieve(v["id"]).status, "completed")
        mp4 = self.client.videos.download_content(v["id"]).read()
        self.assertEqual(mp4[4:8], b"ftyp")
        png = self.client.videos.download_content(v["id"], variant="thumbnail").read()
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        self.assertIn(v["id"], [x.id for x in self.client.videos.list(limit=100).data])

    def test_twenty_concurrent_jobs_have_the_right_digests(self):
        seeds = [i % 4 for i in range(20)]
        ids = [None] * 20

        def submit(i):
            ids[i] = self.create(seed=seeds[i]).id

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(DEADLINE_S)
        self.assertEqual(len(set(ids)), 20)
        digests = {}
        for i, vid in enumerate(ids):
            self.assertEqual(self.srv.wait_status(vid, ("completed", "failed"))["status"], "completed")
            digests.setdefault(seeds[i], set()).add(sha256(self.client.videos.download_content(vid).read()))
        self.assertEqual(sorted(digests), [0, 1, 2, 3])
        for s, d in digests.items():
            self.assertEqual(len(d), 1, "seed %d gave different videos" % s)
        self.assertEqual(len({next(iter(d)) for d in digests.values()}), 4, "different seeds gave one video")
        with tempfile.TemporaryDirectory() as t:
            self.assertEqual(next(iter(digests[1])), sha256(cli_mp4(self.cache, 1, os.path.join(t, "c.mp4"))))

    def test_cancel_queued_and_running(self):
        running = self.create(steps=150).id
        queued = self.create(steps=150).id
        end = time.monotonic() + DEADLINE_S
        while self.srv.get_json("/v1/videos/" + running)[1]["progress"] == 0 and time.monotonic() < end:
            time.sleep(0.05)
        code, v = self.srv.curl("-X", "DELETE", self.srv.base + "/v1/videos/" + queued)
        self.assertEqual(code, 200)
        self.assertEqual(json.loads(v)["status"], "cancelled")  # a queued job: at once
        code, v = self.srv.curl("-X", "DELETE", self.srv.base + "/v1/videos/" + running)
        self.assertEqual(code, 200)
        v = self.srv.wait_status(running, ("cancelled", "completed", "failed"))
        self.assertEqual(v["status"], "cancelled")
        self.assertLess(v["progress"], 95)
        for vid in (queued, running):
            self.assertEqual(self.srv.curl(self.srv.base + "/v1/videos/%s/content" % vid)[0], 409)
            self.assertFalse(os.path.exists(os.path.join(self.srv.out_dir, vid + ".mp4")))

    def test_sync_returns_the_mp4_and_a_disconnect_cancels(self):
        code, mp4 = self.srv.post_json("/v1/videos/sync", dict(prompt="a red fox", seed=1,
                                                              num_inference_steps=SMALL_STEPS, **SMALL))
        self.assertEqual(code, 200)
        self.assertEqual(mp4[4:8], b"ftyp")
        # A client that sends a long job and goes away.
        body = json.dumps(dict(prompt="a red fox", num_inference_steps=150, **SMALL)).encode()
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=DEADLINE_S)
        s.sendall(b"POST /v1/videos/sync HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        vid = [ln.split(b":")[1].strip().decode() for ln in head.split(b"\r\n") if ln.lower().startswith(b"x-video-id")][0]
        self.srv.wait_status(vid, ("in_progress",))
        s.close()
        self.assertEqual(self.srv.wait_status(vid, ("cancelled", "completed", "failed"))["status"], "cancelled")

    def test_events_report_every_step_and_previews(self):
        steps = 3
        code, body = self.srv.post_json("/v1/videos", dict(prompt="a red fox", num_inference_steps=steps,
                                                          preview_every=1, **SMALL))
        self.assertEqual(code, 200)
        vid = json.loads(body)["id"]
        code, stream = self.srv.curl("-N", self.srv.base + "/v1/videos/%s/events" % vid)
        self.assertEqual(code, 200)
        events = []
        for block in stream.decode().split("\n\n"):
            lines = dict(ln.split(": ", 1) for ln in block.splitlines() if ln and not ln.startswith(":"))
            if "event" in lines:
                events.append((lines["event"], json.loads(lines["data"])))
        names = [e for e, _ in events]
        self.assertEqual(names.count("progress"), steps, names)
        self.assertEqual(names.count("preview"), steps, names)
        self.assertEqual(names[-1], "completed")
        eta = [d["eta_seconds"] for e, d in events if e == "progress"]
        self.assertEqual(eta[-1], 0)
        # Previews are dropped once the job is done; this stream read them live or got "{}".
        for e, d in events:
            if e == "preview" and "image_base64" in d:
                self.assertEqual(base64.b64decode(d["image_base64"])[:8], b"\x89PNG\r\n\x1a\n")

    def test_image_to_video_with_a_multipart_reference(self):
        with tempfile.TemporaryDirectory() as t:
            p = os.path.join(t, "ref.png")
            with open(p, "wb") as f:
                f.write(tiny_png())
            code, body = self.srv.curl("-X", "POST", self.srv.base + "/v1/videos", "-F", "prompt=the fox looks up",
                                       "-F", "seconds=0.2", "-F", "size=32x32", "-F", "num_inference_steps=2",
                                       "-F", "input_reference=@%s;type=image/png" % p)
        self.assertEqual(code, 200, body)
        v = self.srv.wait_status(json.loads(body)["id"], ("completed", "failed"))
        self.assertEqual(v["status"], "completed", v)

    def test_bad_requests_are_4xx_naming_the_field(self):
        ok = dict(prompt="a red fox", **SMALL)
        cases = [
            ({"seconds": "1"}, 400, "prompt"),
            (dict(ok, prompt=""), 400, "prompt"),
            (dict(ok, prompt=" \t\r\n "), 400, "prompt"),  # blank: the engine's own test, as a 400
            (dict(ok, prompt="\u3000"), 400, "prompt"),
            (dict(ok, seconds="soon"), 400, "seconds"),
            (dict(ok, seconds="-1"), 400, "seconds"),
            (dict(ok, seconds="1000"), 400, "seconds"),
            (dict(ok, size="33x32"), 400, "size"),
            (dict(ok, size="big"), 400, "size"),
            ({"prompt": "a red fox", "resolution": "4k"}, 400, "resolution"),
            (dict(ok, resolution="272p"), 400, "size"),  # both
            (dict(ok, num_inference_steps=0), 400, "num_inference_steps"),
            (dict(ok, seed=-3), 400, "seed"),
            (dict(ok, guidance_scale="x"), 400, "guidance_scale"),
            (dict(ok, colour="red"), 400, "colour"),
            (dict(ok, input_reference="data:image/png;base64,AAAA"), 400, "input_reference"),
            (dict(ok, input_reference="https://example.com/x.png"), 400, "input_reference"),
        ]
        for body, status, param in cases:
            code, out = self.srv.post_json("/v1/videos", body)
            self.assertEqual(code, status, (body, out))
            self.assertEqual(json.loads(out)["error"]["param"], param, out)
        code, out = self.srv.post_json("/v1/videos", "{not json")
        self.assertEqual(code, 400)
        self.assertIn("JSON", json.loads(out)["error"]["message"])
        code, out = self.srv.curl("-X", "POST", self.srv.base + "/v1/videos", "-H", "Content-Type: text/plain",
                                  "--data-binary", "hi")
        self.assertEqual(code, 415)
        code, out = self.srv.post_json("/v1/videos", dict(ok, prompt="x" * (2 << 20)))
        self.assertEqual(code, 413)
        self.assertIn("limit", json.loads(out)["error"]["message"])
        self.assertEqual(self.srv.get_json("/v1/videos/video_nope")[0], 404)
        self.assertEqual(self.srv.curl(self.srv.base + "/v1/nothing")[0], 404)
        self.assertEqual(self.srv.curl(self.srv.base + "/v1/videos?limit=0")[0], 400)

    def test_health_and_metrics(self):
        code, h = self.srv.get_json("/health")
        self.assertEqual(code, 200)
        self.assertEqual(h["status"], "ok")
        code, m = self.srv.curl(self.srv.base + "/metrics")
        self.assertEqual(code, 200)
        text = m.decode()
        for name in ("magi2_queue_depth ", 'magi2_jobs{status="completed"} ', "magi2_step_seconds_count ",
                     "magi2_process_resident_memory_bytes "):
            self.assertIn(name, text)


class LimitsAndShutdownTests(unittest.TestCase):
    def setUp(self):
        self.cache = tempfile.mkdtemp(prefix="magi2_serve_cache_")

    def tearDown(self):
        shutil.rmtree(self.cache, ignore_errors=True)

    def test_api_key_full_queue_and_graceful_sigterm(self):
        srv = Server(self.cache, "--api-key", "sekret", "--max-queue", "1")
        try:
            auth = "Authorization: Bearer sekret"
            body = dict(prompt="a red fox", num_inference_steps=40, **SMALL)
            self.assertEqual(srv.post_json("/v1/videos", body)[0], 401)
            self.assertEqual(srv.post_json("/v1/videos", body, "Authorization: Bearer wrong")[0], 401)
            self.assertEqual(srv.get_json("/health")[0], 200)  # no key needed
            client = openai.OpenAI(api_key="sekret", base_url=srv.base + "/v1", max_retries=0, timeout=DEADLINE_S)
            running = client.videos.create(prompt="a red fox", **SMALL, extra_body={"num_inference_steps": 40}).id
            srv.wait_status(running, ("in_progress",), (auth,))
            queued = json.loads(srv.post_json("/v1/videos", body, auth)[1])["id"]
            code, out = srv.curl("-i", "-X", "POST", srv.base + "/v1/videos", "-H", auth, "-H",
                                 "Content-Type: application/json", "--data-binary", json.dumps(body))
            self.assertEqual(code, 429, out)
            self.assertIn(b"retry-after:", out.lower())
            self.assertEqual(srv.stop(), 0)  # SIGTERM: the running job finishes, the queued one is cancelled
        finally:
            srv.stop(signal.SIGKILL)
        self.assertTrue(os.path.exists(os.path.join(srv.out_dir, running + ".mp4")))
        self.assertFalse(os.path.exists(os.path.join(srv.out_dir, queued + ".mp4")))
        self.assertEqual(srv.leftovers(), [])
        shutil.rmtree(srv.out_dir, ignore_errors=True)

    def test_hundred_sequential_jobs_keep_memory_flat(self):
        srv = Server(self.cache, "--keep", "5")
        try:
            body = dict(prompt="a red fox", num_inference_steps=1, **SMALL)
            rss = []
            for i in range(100):
                code, out = srv.post_json("/v1/videos", dict(body, seed=i))
                self.assertEqual(code, 200, out)
                self.assertEqual(srv.wait_status(json.loads(out)["id"], ("completed", "failed"))["status"],
                                 "completed")
                if i in (9, 99):
                    rss.append(srv.rss())
            growth = rss[1] - rss[0]
            print("RSS after 10 jobs %.1f MiB, after 100 jobs %.1f MiB (growth %.1f MiB)" %
                  (rss[0] / 2**20, rss[1] / 2**20, growth / 2**20), file=sys.stderr)
            self.assertLess(growth, 64 << 20)
            self.assertEqual(len([f for f in os.listdir(srv.out_dir) if f.endswith(".mp4")]), 5)  # retention
            self.assertEqual(srv.stop(), 0)
        finally:
            srv.stop(signal.SIGKILL)
            shutil.rmtree(srv.out_dir, ignore_errors=True)


if __name__ == "__main__":
    MAGI2 = os.path.abspath(sys.argv.pop(1))
    # The package marks its videos API deprecated (for its own hosted service).
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    if openai is None:
        print("SKIP: the openai package is missing (run scripts/setup.sh: it installs it into .deps/py)")
        sys.exit(77)
    # Every job here writes an MP4; a build without FFmpeg (-DMAGI2_WITH_FFMPEG=OFF) says so in --version.
    if "MP4 via FFmpeg: off" in subprocess.run([MAGI2, "--version"], capture_output=True, text=True).stdout:
        print("SKIP: this magi2 has no FFmpeg, so it cannot write the MP4s these clients fetch")
        sys.exit(77)
    unittest.main(verbosity=2, warnings="ignore")
