#include "models/qwen35/prompt.h"

#include <algorithm>
#include <initializer_list>
#include <optional>

#include "core/error.h"
#include "models/qwen35/prompt_pyjson.h"
#include "models/qwen35/tok_unicode.h"

namespace magi2::qwen35 {

/// DEFAULT_NEGATIVE_PROMPT, verbatim data from spec magi2-pipeline.md
/// Appendix C (official inference/pipeline/inference_engine.py builds it from
/// three pieces: visual defects, audio defects, voice/delivery defects; kept
/// as the same three pieces here). 1 721 bytes, SHA-256
/// 5ac0746de6c7e0388a16122d9c7e751b1cb067242218bf6f41ec1e88271cdcb9.
static constexpr std::string_view kDefaultNegativePrompt =
    "Bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, images, static, "
    "overall gray, worst quality, low quality, JPEG compression residue, ugly, incomplete, extra fingers, poorly "
    "drawn hands, poorly drawn faces, deformed, disfigured, misshapen limbs, fused fingers, still picture, messy "
    "background, three legs, many people in the background, walking backwards"
    ", low quality, worst quality, poor quality, noise, background noise, hiss, hum, buzz, crackle, static, "
    "compression artifacts, MP3 artifacts, digital clipping, distortion, muffled, muddy, unclear, echo, reverb, "
    "room echo, over-reverberated, hollow sound, distant, washed out, harsh, shrill, piercing, grating, tinny, "
    "thin sound, boomy, bass-heavy, flat EQ, over-compressed, abrupt cut, jarring transition, sudden silence, "
    "looping artifact, music, instrumental, sirens, alarms, crowd noise, unrelated sound effects, chaotic, "
    "disorganized, messy, cheap sound"
    ", emotionless, flat delivery, deadpan, lifeless, apathetic, robotic, mechanical, monotone, flat intonation, "
    "undynamic, boring, reading from a script, AI voice, synthetic, text-to-speech, TTS, insincere, fake emotion, "
    "exaggerated, overly dramatic, melodramatic, cheesy, cringey, hesitant, unconfident, tired, weak voice, "
    "stuttering, stammering, mumbling, slurred speech, mispronounced, bad articulation, lisp, vocal fry, creaky "
    "voice, mouth clicks, lip smacks, wet mouth sounds, heavy breathing, audible inhales, plosives, p-pops, "
    "coughing, clearing throat, sneezing, speaking too fast, rushed, speaking too slow, dragged out, unnatural "
    "pauses, awkward silence, choppy, disconnected, multiple speakers, two voices, background talking, out of tune, "
    "off-key, autotune artifacts";

std::string_view default_negative_prompt() { return kDefaultNegativePrompt; }

namespace {

// Where the official renderer would raise TypeError (caught by the official
// `_normalize_prompt`, which then keeps the raw prompt).
struct PyTypeError {
  std::string what;
};

bool is_empty_value(const PyJson& v) {
  return v.is_null() || (v.is_array() && v.empty()) || (v.is_object() && v.empty());
}

// Python truthiness of a parsed JSON value.
bool truthy(const PyJson& v) {
  switch (v.type()) {
    case PyJson::value_t::null: return false;
    case PyJson::value_t::boolean: return v.get<bool>();
    case PyJson::value_t::number_integer: return v.get<int64_t>() != 0;
    case PyJson::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case PyJson::value_t::number_float: return v.get<double>() != 0.0;
    case PyJson::value_t::string: return !v.get_ref<const std::string&>().empty();
    default: return !v.empty();
  }
}

// Dicts drop keys whose cleaned value is None / [] / {}; lists drop None
// items only (items that become empty are kept).
PyJson strip_empty(const PyJson& v) {
  if (v.is_object()) {
    PyJson out = PyJson::object();
    for (auto it = v.begin(); it != v.end(); ++it) {
      PyJson c = strip_empty(it.value());
      if (!is_empty_value(c)) out[it.key()] = std::move(c);
    }
    return out;
  }
  if (v.is_array()) {
    PyJson out = PyJson::array();
    for (const auto& e : v)
      if (!e.is_null()) out.push_back(strip_empty(e));
    return out;
  }
  return v;
}

const PyJson& null_json() {
  static const PyJson n;
  return n;
}

// dict.get(key) with None for a missing key (or a non-dict receiver, which
// the official code never calls .get on: callers pass as_dict results).
const PyJson& get(const PyJson& d, const char* key) {
  if (!d.is_object()) return null_json();
  auto it = d.find(key);
  return it == d.end() ? null_json() : *it;
}

const PyJson& as_dict(const PyJson& v) {
  static const PyJson empty = PyJson::object();
  return v.is_object() ? v : empty;
}

// `for x in (value or [])` with Python's iteration rules: lists yield items;
// strings and dicts yield str keys/chars (never dicts, so callers skip them);
// a truthy number or bool is not iterable.
std::vector<const PyJson*> iter_or_empty(const PyJson& v, const char* what) {
  std::vector<const PyJson*> out;
  if (!truthy(v)) return out;
  if (v.is_array()) {
    for (const auto& e : v) out.push_back(&e);
    return out;
  }
  if (v.is_number() || v.is_boolean()) throw PyTypeError{str_cat("'", what, "' is not iterable")};
  return out;
}

std::string one_line(const PyJson& v) {
  if (v.is_null()) return "";
  return py_collapse_whitespace(py_str(v));
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::vector<std::string> nonempty(std::initializer_list<std::string> parts) {
  std::vector<std::string> out;
  for (const auto& p : parts)
    if (!p.empty()) out.push_back(p);
  return out;
}

// The renderer proper, on an already parsed value; `raw` is returned for
// values without "global_layer".
std::string render_markdown(const PyJson& parsed, std::string_view raw) {
  const PyJson obj = strip_empty(parsed);
  if (!obj.is_object() || !obj.contains("global_layer")) return std::string(raw);

  const PyJson& global = as_dict(get(obj, "global_layer"));
  const PyJson& dynamic = as_dict(get(obj, "dynamic_layer"));
  std::vector<std::string> lines;

  const std::string context = one_line(get(global, "context"));
  const std::string description = one_line(get(global, "description"));
  if (!context.empty() || !description.empty()) {
    lines.push_back(context.empty() ? "context" : "context: " + context);
    if (!description.empty()) lines.push_back(description);
  }

  const PyJson& aesthetics = as_dict(get(global, "aesthetics"));
  std::vector<std::string> aparts;
  for (const auto& [label, key] : {std::pair{"style", "style"}, std::pair{"mood", "mood_atmosphere"},
                                   std::pair{"color", "color_scheme"}}) {
    const std::string v = one_line(get(aesthetics, key));
    if (!v.empty()) aparts.push_back(std::string(label) + "=" + v);
  }
  if (!aparts.empty()) lines.push_back("aesthetics: " + join(aparts, "; "));

  const PyJson& audio = as_dict(get(global, "audio_baseline"));
  const PyJson& dialogue = as_dict(get(audio, "dialogue"));
  std::vector<std::string> auparts;
  const std::string language = one_line(get(dialogue, "language"));
  const PyJson& speakers = get(dialogue, "speaker_tags");
  const std::string ambience = one_line(get(audio, "ambience"));
  if (!language.empty()) auparts.push_back("language=" + language);
  if (!speakers.is_null() && !(speakers.is_array() && speakers.empty())) {
    std::vector<std::string> tags;
    if (speakers.is_array()) {
      for (const auto& s : speakers) tags.push_back(one_line(s));
    } else {
      tags.push_back(one_line(speakers));
    }
    auparts.push_back("speakers=" + join(tags, ","));
  }
  if (!ambience.empty()) auparts.push_back("ambience=" + ambience);
  if (!auparts.empty()) lines.push_back("audio: " + join(auparts, "; "));

  const PyJson& subjects = get(global, "alive_subjects_static");
  if (subjects.is_array() && !subjects.empty()) {
    lines.push_back("subjects:");
    for (const auto& s : subjects) {
      if (!s.is_object()) continue;
      const PyJson& va = as_dict(get(s, "visual_attributes"));
      std::vector<std::string> attrs;
      for (const char* key : {"gender", "age_group", "ethnicity", "clothing", "appearance_details"}) {
        const PyJson& v = get(va, key);
        if (!va.contains(key) || is_empty_value(v)) continue;
        const std::string t = one_line(v);
        if (!t.empty()) attrs.push_back(std::string(key) + "=" + t);
      }
      std::string row = " - " + join(nonempty({one_line(get(s, "subject_id")), one_line(get(s, "description"))}), " | ");
      const std::string extra =
          join(nonempty({one_line(get(s, "position")), one_line(get(s, "orientation"))}), "; ");
      if (!extra.empty()) row += " (" + extra + ")";
      if (!attrs.empty()) row += " :: " + join(attrs, "; ");
      lines.push_back(row);
    }
  }

  const PyJson& objects = get(global, "objects_static");
  if (objects.is_array() && !objects.empty()) {
    lines.push_back("objects:");
    for (const auto& o : objects) {
      if (!o.is_object()) continue;
      std::string row = " - " + join(nonempty({one_line(get(o, "object_id")), one_line(get(o, "description"))}), " | ");
      const std::string details =
          join(nonempty({one_line(get(o, "shape_and_color")), one_line(get(o, "position"))}), "; ");
      if (!details.empty()) row += " :: " + details;
      lines.push_back(row);
    }
  }

  const PyJson& segments = get(dynamic, "timeline_segments");
  if (segments.is_array() && !segments.empty()) {
    lines.push_back("timeline:");
    for (const auto& seg : segments) {
      if (!seg.is_object()) continue;
      const PyJson& basic = as_dict(get(seg, "segment_basic_info"));
      const std::string ts = one_line(get(basic, "timestamp_range"));
      const std::string desc = one_line(get(basic, "segment_description"));
      std::string head = ts.empty() ? " -" : " - " + ts;
      if (!desc.empty()) head += " " + desc;
      lines.push_back(py_rstrip(head));

      const PyJson& seg_audio = as_dict(get(seg, "audio"));
      for (const PyJson* dl : iter_or_empty(get(seg_audio, "dialogue_lines"), "dialogue_lines")) {
        if (!dl->is_object()) continue;
        const std::string speaker = one_line(get(*dl, "speaker"));
        const std::string text = one_line(get(*dl, "text"));
        const std::string when = one_line(get(*dl, "timestamp"));
        if (text.empty()) continue;
        std::string line = (speaker.empty() ? std::string("   - dialogue: ") : "   - dialogue " + speaker + ": ") + text;
        if (!when.empty()) line += " (" + when + ")";
        lines.push_back(line);
      }
      for (const PyJson* a : iter_or_empty(get(seg, "alive_subjects"), "alive_subjects")) {
        if (!a->is_object()) continue;
        const PyJson& action = as_dict(get(*a, "action"));
        const auto parts = nonempty({one_line(get(action, "primary_action")), one_line(get(action, "interaction")),
                                     one_line(get(action, "facial_expression"))});
        if (!parts.empty()) lines.push_back("   - action " + one_line(get(*a, "subject_id")) + ": " + join(parts, "; "));
      }
      for (const PyJson* o : iter_or_empty(get(seg, "objects"), "objects")) {
        if (!o->is_object()) continue;
        const PyJson& state = as_dict(get(*o, "dynamic_state"));
        const auto parts = nonempty({one_line(get(state, "state_change")), one_line(get(state, "motion_detail"))});
        if (!parts.empty()) lines.push_back("   - objects " + one_line(get(*o, "object_id")) + ": " + join(parts, "; "));
      }
    }
  }

  const PyJson& refs = obj.contains("reference_layer") ? obj.at("reference_layer") : null_json();
  if (refs.is_array()) {
    for (const auto& r : refs) {
      std::string s = py_str(r);
      if (!py_strip(s).empty()) lines.push_back(std::move(s));
    }
  }

  std::string out;
  bool first = true;
  for (const auto& l : lines) {
    if (py_strip(l).empty()) continue;
    if (!first) out += "\n";
    first = false;
    out += l;
  }
  return out;
}

void check_utf8(std::string_view s, const char* what) { (void)utf8_decode(s, what); }

}  // namespace

std::string json_to_compact_markdown(std::string_view raw_json) {
  check_utf8(raw_json, "prompt");
  std::string err;
  const std::optional<PyJson> parsed = py_json_loads(py_strip(raw_json), &err);
  MAGI2_CHECK(parsed.has_value(), "prompt JSON is malformed: ", err);
  try {
    return render_markdown(*parsed, raw_json);
  } catch (const PyTypeError& e) {
    throw Error(str_cat("prompt JSON has an unsupported structure (the official renderer raises TypeError: ",
                        e.what, ")"));
  }
}

std::string normalize_prompt(std::string_view prompt, JsonPromptPolicy policy) {
  check_utf8(prompt, "prompt");
  std::string err;
  const std::optional<PyJson> parsed = py_json_loads(prompt, &err);
  if (!parsed.has_value()) {
    if (policy == JsonPromptPolicy::kStrict) {
      const size_t first = prompt.find_first_not_of(" \t\r\n");
      MAGI2_CHECK(first == std::string_view::npos || prompt[first] != '{',
                  "prompt looks like a JSON object but is malformed: ", err);
    }
    return std::string(prompt);
  }
  if (!parsed->is_object() && !parsed->is_array()) return std::string(prompt);
  try {
    return render_markdown(*parsed, prompt);
  } catch (const PyTypeError&) {
    return std::string(prompt);  // the official code swallows the TypeError
  }
}

std::string ensure_figure_token(std::string_view prompt) {
  check_utf8(prompt, "prompt");
  std::optional<PyJson> parsed = py_json_loads(prompt);
  if (parsed.has_value() && parsed->is_object()) {
    (*parsed)["reference_layer"] = PyJson::array({std::string(kFigureSentence)});
    return py_json_dumps(*parsed);
  }
  return std::string(prompt) + "reference_layer:" + std::string(kFigureSentence);
}

std::vector<int64_t> figure_token_indices(std::string_view normalized_prompt, const std::vector<CpRange>& offsets,
                                          std::string_view target) {
  std::vector<int64_t> out;
  if (target.empty()) return out;
  const size_t at = normalized_prompt.find(target);
  if (at == std::string_view::npos) return out;
  const int64_t s = static_cast<int64_t>(utf8_decode(normalized_prompt.substr(0, at), "prompt").size());
  const int64_t e = s + static_cast<int64_t>(utf8_decode(target, "target").size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    const auto [a, b] = offsets[i];
    if (a == 0 && b == 0 && i != 0) continue;
    if (std::max(a, s) < std::min(b, e)) out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

PreparedPrompt prepare_prompt(const Tokenizer& tok, std::string_view prompt, bool i2v, const EncodeOptions& opt) {
  PreparedPrompt p;
  p.encoded = i2v ? ensure_figure_token(prompt) : std::string(prompt);
  p.normalized = normalize_prompt(p.encoded);
  p.encoding = tok.encode(p.normalized, opt);
  if (i2v) p.figure_indices = figure_token_indices(p.normalized, p.encoding.offsets);
  return p;
}

}  // namespace magi2::qwen35
