#include "bench_load.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/model_files.h"
#include "engine/model_writer.h"
#include "engine/tiny_model.h"
#include "io/checkpoint.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "models/magi2_dit/weights.h"

namespace magi2::cli {

namespace fs = std::filesystem;

namespace {

// Every tensor's bytes read from its shard with pread, spread over threads by
// size (the host half of the CUDA upload), into per-thread 32 MiB buffers.
void read_all(const std::vector<Tensor>& tensors) {
  constexpr size_t kChunk = size_t{32} << 20;
  struct Job {
    FileSpan span;
    size_t bytes = 0;
  };
  std::vector<Job> jobs;
  for (const Tensor& t : tensors) {
    Job j;
    j.bytes = t.nbytes();
    MAGI2_CHECK(find_mapped_span(t.data(), t.nbytes(), &j.span), "bench load: a weight is not in a mapped shard");
    jobs.push_back(std::move(j));
  }
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.bytes > b.bytes; });
  const size_t workers = std::max<size_t>(1, std::min<size_t>({8, std::thread::hardware_concurrency(), jobs.size()}));
  std::vector<std::vector<Job>> plan(workers);
  std::vector<size_t> load(workers, 0);
  for (Job& j : jobs) {
    const size_t w = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[w] += j.bytes;
    plan[w].push_back(std::move(j));
  }
  std::vector<std::thread> threads;
  std::vector<std::string> errors(workers);
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      try {
        std::vector<char> buf(kChunk);
        std::map<std::string, int> fds;
        for (const Job& j : plan[w]) {
          auto it = fds.find(j.span.path);
          if (it == fds.end()) it = fds.emplace(j.span.path, ::open(j.span.path.c_str(), O_RDONLY | O_CLOEXEC)).first;
          MAGI2_CHECK(it->second >= 0, "cannot open '", j.span.path, "'");
          for (size_t off = 0; off < j.bytes; off += kChunk)
            pread_exact(it->second, j.span.path, j.span.offset + off, buf.data(), std::min(kChunk, j.bytes - off));
        }
        for (auto& [p, fd] : fds)
          if (fd >= 0) ::close(fd);
      } catch (const Error& e) {
        errors[w] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) MAGI2_CHECK(e.empty(), e);
}

}  // namespace

void write_random_dit(const std::string& dir, const DitArch& arch) {
  const fs::path pdir = fs::path(dir) / "preview";
  fs::create_directories(pdir);
  write_sharded_checkpoint(
      pdir.string(), dit_tensor_specs(arch), [&](const std::string& name) { return layer_shard_name(name, arch.num_layers); },
      [&](const DitTensorSpec& s) { return random_dit_tensor(s, 7, true); }, true);
  std::printf("bench load: wrote %s\n", pdir.c_str());
  std::fflush(stdout);
}

nlohmann::json bench_load(const std::string& model, const DitArch& arch, Backend& be, int reps) {
  const std::string tdir = find_transformer_dir(model);
  const Checkpoint ckpt = Checkpoint::open(tdir);
  DitWeights w = DitWeights::bind(ckpt, arch);
  std::vector<Tensor> tensors;
  w.for_each_tensor([&](const char*, Tensor& t) {
    if (t.defined()) tensors.push_back(t);
  });
  read_all(tensors);  // warm the page cache: the passes below read from memory
  using Clock = std::chrono::steady_clock;
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    if (be.device() == Device::CPU) {
      read_all(tensors);
    } else {
      const DitWeights d = w.to_backend(be);
      be.synchronize();
    }
    secs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::vector<double> sorted = secs;
  std::sort(sorted.begin(), sorted.end());
  const double med = sorted[sorted.size() / 2];
  return {{"stage", "load"},
          {"model", model},
          {"backend", be.name()},
          {"bytes", w.num_bytes},
          {"tensors", w.num_tensors},
          {"shards", ckpt.num_shards()},
          {"layers", arch.num_layers},
          {"seconds", secs},
          {"gb_per_s_median", med > 0 ? static_cast<double>(w.num_bytes) / 1e9 / med : 0.0},
          {"what", be.device() == Device::CPU
                       ? "page cache -> host buffers (parallel pread, 8 threads, 32 MiB reads)"
                       : "page cache -> device (DitWeights::to_backend: parallel pread into pinned buffers, async copies)"}};
}

}  // namespace magi2::cli
