// `--offload layerwise` on the CUDA backend (skipped without a GPU): the
// golden tiny DiT with its layers in pinned host memory, streamed through two
// device slots on the copy queue, gives the resident run's bytes: one eager
// forward (forced and natural routing), a captured forward replayed, and the
// denoising loop (step 0 eager, then graph replays) and its eager twin. Also
// the PCIe bytes and rate the queue reports.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda/copy_queue.h"
#include "cuda/cuda_fixture.h"
#include "golden/dit_fixture.h"
#include "golden/loop_fixture.h"
#include "models/magi2_dit/offload.h"
#include "pipeline/generate.h"

namespace magi2::test {
namespace {

// The golden DiT twice on the GPU: resident (one upload) and streamed (--offload layerwise).
struct TwoDits {
  DitWeights w;
  DitOffload off;
  Dit resident, streamed;
  TwoDits(const GoldenDit& g, Backend& gpu)
      : w(g.weights.to_backend(gpu)),
        off(g.weights, gpu, cuda_copy_queue(gpu, 2)),
        resident(g.config.arch, w, gpu),
        streamed(g.config.arch, off, gpu) {}
};

class CudaOffload : public CudaParityTest {
 protected:
  // The golden inputs with x, coords and time_emb on the device (a captured
  // forward may not stage host tensors: that is a pageable copy).
  DitInputs device_inputs(const GoldenDit& g, const std::string& p) {
    DitInputs in = g.inputs(p);
    in.x = up(in.x);
    in.coords = up(in.coords);
    in.time_emb = up(in.time_emb);
    return in;
  }
};

TEST_F(CudaOffload, EagerForwardEqualsResidentBitForBit) {
  GoldenDit& g = GoldenDit::get();
  TwoDits d(g, *gpu_);
  Dit &resident = d.resident, &streamed = d.streamed;
  int forwards = 0;
  for (const std::string p : {"t2v_", "i2v_"}) {
    DitRunOptions forced;
    forced.forced_topk = g.forced_topk(p);
    const Tensor ref = down(resident.forward(g.inputs(p), forced));
    EXPECT_EQ(count_diff(down(streamed.forward(g.inputs(p), forced)), ref, (p + "forced routing").c_str()), 0);
    const Tensor nat = down(resident.forward(g.inputs(p)));
    EXPECT_EQ(count_diff(down(streamed.forward(g.inputs(p))), nat, (p + "natural routing").c_str()), 0);
    forwards += 2;
  }
  DitOffload& off = d.off;
  const CopyQueueStats st = off.stats();
  EXPECT_EQ(st.bytes, forwards * off.bytes_per_forward());
  EXPECT_GT(st.gb_per_s(), 0.0);
  std::printf("  %d forwards: %.2f MB per forward over PCIe, %zu copies at %.2f GB/s; slot %.2f MB, pinned %.2f MB\n",
              forwards, off.bytes_per_forward() / 1e6, st.copies, st.gb_per_s(), off.slot_bytes() / 1e6,
              off.pinned_bytes() / 1e6);
}

TEST_F(CudaOffload, CapturedForwardReplaysTheResidentBytes) {
  GoldenDit& g = GoldenDit::get();
  TwoDits d(g, *gpu_);
  Dit &resident = d.resident, &streamed = d.streamed;
  const DitInputs t2v = device_inputs(g, "t2v_");
  const Tensor ref = down(resident.forward(t2v));
  Tensor out = streamed.forward(t2v);  // eager first: plans and workspaces exist before capture
  EXPECT_EQ(count_diff(down(out), ref, "eager streamed forward"), 0);
  std::unique_ptr<StepGraph> graph = gpu_->capture([&] { out = streamed.forward(t2v); });
  for (int rep = 0; rep < 3; ++rep) {
    gpu_->zero(out);
    graph->launch();
    EXPECT_EQ(count_diff(down(out), ref, "replayed streamed forward"), 0) << "replay " << rep;
    // The resident forward between replays neither sees nor disturbs the slots.
    EXPECT_EQ(count_diff(down(resident.forward(t2v)), ref, "resident forward between replays"), 0);
  }
}

TEST_F(CudaOffload, DenoiseLoopEqualsResidentEagerAndReplayed) {
  GoldenDit& g = GoldenDit::get();
  auto sampler = SafetensorsFile::open(golden_dir() + "/dit_tiny/sampler.safetensors");
  GenerateRequest req = golden_loop_request(g, *sampler);
  req.routing_override.clear();  // natural routing: steps 1.. replay one captured graph
  TwoDits d(g, *gpu_);
  Dit &resident = d.resident, &streamed = d.streamed;
  const GenerateResult ref = generate_latents(resident, req);
  const GenerateResult graph = generate_latents(streamed, req);
  EXPECT_EQ(count_diff(graph.latent, ref.latent, "loop latent, layerwise graph vs resident"), 0);
  EXPECT_EQ(count_diff(graph.audio_latent, ref.audio_latent, "loop audio latent, layerwise graph vs resident"), 0);
  req.use_graph = false;
  const GenerateResult eager = generate_latents(streamed, req);
  EXPECT_EQ(count_diff(eager.latent, ref.latent, "loop latent, layerwise eager vs resident"), 0);
  EXPECT_EQ(count_diff(eager.audio_latent, ref.audio_latent, "loop audio latent, layerwise eager vs resident"), 0);
  std::printf("  step ms resident / layerwise:");
  for (size_t i = 0; i < ref.step_ms.size() && i < graph.step_ms.size(); ++i)
    std::printf(" %.2f/%.2f", ref.step_ms[i], graph.step_ms[i]);
  std::printf("  (%.2f GB/s over PCIe in the eager steps)\n", d.off.stats().gb_per_s());
}

}  // namespace
}  // namespace magi2::test
