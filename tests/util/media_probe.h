// Probes of written MP4 files for the tests: ffprobe's stream description and
// what headless Chromium's <video> and WebAudio make of the file. Callers skip
// with GTEST_SKIP when a tool is missing (have_tool).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/mmap_file.h"
#include "media/mp4.h"
#include "util/testing.h"

namespace magi2::test {

/// True when `name` is on PATH.
inline bool have_tool(const std::string& name) {
  return run_command("command -v " + name + " >/dev/null", nullptr) == 0;
}

#define SKIP_WITHOUT_MP4()                                                              \
  do {                                                                                  \
    if (!mp4_supported()) GTEST_SKIP() << "this build has no FFmpeg (MP4 writer off)"; \
  } while (0)
#define SKIP_WITHOUT_TOOL(name)                                                              \
  do {                                                                                       \
    if (!have_tool(name)) GTEST_SKIP() << name " not installed (Debian package in setup.sh)"; \
  } while (0)

/// `ffprobe -show_streams -show_format` of `path` as JSON.
inline nlohmann::json ffprobe(const std::string& path) {
  std::string out;
  const int rc = run_command("ffprobe -v error -show_streams -show_format -of json '" + path + "'", &out);
  EXPECT_EQ(rc, 0) << out;
  return nlohmann::json::parse(out);
}

/// The first stream of codec_type `type` ("video", "audio").
inline const nlohmann::json& stream_of(const nlohmann::json& probe, const std::string& type) {
  for (const auto& s : probe.at("streams"))
    if (s.at("codec_type") == type) return s;
  throw Error("no " + type + " stream");
}

/// Exact duration in seconds as the rational duration_ts * time_base, compared
/// without floating point: duration_ts * tb_num * den == num * tb_den.
inline bool duration_is(const nlohmann::json& s, int64_t num, int64_t den) {
  const std::string tb = s.at("time_base");
  const int64_t tb_num = std::stoll(tb.substr(0, tb.find('/')));
  const int64_t tb_den = std::stoll(tb.substr(tb.find('/') + 1));
  return s.at("duration_ts").get<int64_t>() * tb_num * den == num * tb_den;
}

/// Opens dir/mp4_name in headless Chromium and returns the page's JSON report:
/// duration, readyState, width, height, meanRGB of the first decoded frame, and
/// audioLength/audioRate/audioChannels from WebAudio's decode (or error /
/// audioError). "pending" when the page never reported.
inline std::string chromium_probe(const std::string& dir, const std::string& mp4_name) {
  write_file_atomic(dir + "/page.html", R"(<html><body>
<video id="v" src=")" + mp4_name + R"(" muted preload="auto"></video><pre id="out">pending</pre>
<script>
const v = document.getElementById('v'), out = document.getElementById('out'), r = {};
const show = () => { out.textContent = JSON.stringify(r); };
v.addEventListener('error', () => { r.error = v.error ? v.error.code + ' ' + v.error.message : '?'; show(); });
v.addEventListener('loadeddata', () => {
  r.duration = v.duration; r.readyState = v.readyState; r.width = v.videoWidth; r.height = v.videoHeight;
  const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
  const g = c.getContext('2d'); g.drawImage(v, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data; let s = 0;
  for (let i = 0; i < d.length; i += 4) s += d[i] + d[i + 1] + d[i + 2];
  r.meanRGB = s / (d.length / 4 * 3); show();
});
fetch(')" + mp4_name + R"(').then(x => x.arrayBuffer())
  .then(b => new OfflineAudioContext(2, 44100, 44100).decodeAudioData(b))
  .then(a => { r.audioLength = a.length; r.audioRate = a.sampleRate; r.audioChannels = a.numberOfChannels; show(); })
  .catch(e => { r.audioError = String(e); show(); });
</script></body></html>)");
  // Virtual time can run out before the media threads finish on a loaded machine:
  // try again (up to 3 times) until both the video and the audio parts reported
  // and the frame read back is not all black.
  std::string text = "pending";
  for (int attempt = 1; attempt <= 3; ++attempt) {
    std::string dom;
    const int rc = run_command("timeout 60 chromium --headless --no-sandbox --disable-gpu --mute-audio "
                               "--allow-file-access-from-files --user-data-dir='" + dir + "/profile' "
                               "--virtual-time-budget=30000 --dump-dom 'file://" + dir + "/page.html' 2>/dev/null",
                               &dom);
    EXPECT_EQ(rc, 0) << dom;
    const std::string tag = "<pre id=\"out\">";
    const size_t b = dom.find(tag), e = dom.find("</pre>", b);
    if (rc != 0 || b == std::string::npos) continue;
    text = dom.substr(b + tag.size(), e - b - tag.size());
    std::printf("  chromium (attempt %d): %s\n", attempt, text.c_str());
    if (text.find("error") != std::string::npos || text.find("Error") != std::string::npos) break;
    // A canvas read at 'loadeddata' can still see an uncomposited (all-black) frame on a loaded
    // machine; the clips the tests play never start black, so that is a retry, not a result.
    const bool black = text.find("\"meanRGB\":0,") != std::string::npos || text.find("\"meanRGB\":0}") != std::string::npos;
    if (!black && text.find("\"duration\"") != std::string::npos && text.find("audio") != std::string::npos) break;
  }
  return text;
}

}  // namespace magi2::test
