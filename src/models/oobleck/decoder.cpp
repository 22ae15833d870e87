#include "models/oobleck/decoder.h"

#include <utility>
#include <vector>

#include "core/error.h"
#include "models/oobleck/resample.h"

namespace magi2 {

OobleckDecoder OobleckDecoder::load(const std::string& sao_dir, Backend& be) {
  SaoVaeConfig c = SaoVaeConfig::load(sao_dir);
  OobleckDecoderWeights w = OobleckDecoderWeights::load(sao_dir + "/model.safetensors", c);
  return OobleckDecoder(std::move(c), std::move(w), be);
}

OobleckDecoder::OobleckDecoder(SaoVaeConfig config, OobleckDecoderWeights weights, Backend& be)
    : config_(std::move(config)), weights_(std::move(weights)), be_(&be) {
  // Weights go to the backend's device once (a no-op on the CPU backend).
  std::vector<Tensor*> ts;
  auto conv = [&ts](OobleckConv& c) { ts.insert(ts.end(), {&c.w, &c.bias}); };
  auto snake = [&ts](OobleckSnake& s) { ts.insert(ts.end(), {&s.alpha, &s.beta}); };
  conv(weights_.conv_in);
  for (OobleckDecoderBlock& b : weights_.blocks) {
    snake(b.snake);
    conv(b.upsample);
    for (OobleckResidualUnit& r : b.res) {
      snake(r.snake1);
      snake(r.snake2);
      conv(r.conv1);
      conv(r.conv2);
    }
  }
  snake(weights_.snake_out);
  conv(weights_.conv_out);
  to_backend_in_place(be, ts, "audio decoder weights");
}

Tensor OobleckDecoder::conv(const OobleckConv& c, const Tensor& x, const Tensor& residual) const {
  const int64_t k = c.w.size(0);
  const int64_t lout = (x.size(0) + 2 * c.padding - c.dilation * (k - 1) - 1) / c.stride + 1;
  Tensor y = residual.defined() ? residual : be_->alloc({lout, c.w.size(2)}, DType::F32);
  be_->conv1d({.x = x, .w = c.w, .bias = c.bias, .residual = residual, .y = y, .stride = c.stride,
               .padding = c.padding, .dilation = c.dilation});
  return y;
}

Tensor OobleckDecoder::conv_transpose(const OobleckConv& c, const Tensor& x) const {
  const int64_t lout = (x.size(0) - 1) * c.stride - 2 * c.padding + c.w.size(0);
  Tensor y = be_->alloc({lout, c.w.size(2)}, DType::F32);
  be_->conv_transpose1d({.x = x, .w = c.w, .bias = c.bias, .y = y, .stride = c.stride, .padding = c.padding});
  return y;
}

void OobleckDecoder::snake(const OobleckSnake& s, const Tensor& x, const Tensor& y) const {
  be_->snake_beta({.x = x, .alpha = s.alpha, .beta = s.beta, .y = y, .logscale = true});
}

Tensor OobleckDecoder::decode_waveform(const Tensor& latent, const OobleckDump& dump) const {
  const int64_t ld = config_.decoder.latent_dim;
  const bool batched = latent.dim() == 3 && latent.size(0) == 1;
  MAGI2_CHECK(latent.defined() && latent.dtype() == DType::F32 && (latent.dim() == 2 || batched) &&
                  latent.size(-1) == ld && latent.size(-2) >= 1,
              "audio decode: expected an f32 latent [L, ", ld, "] or [1, L, ", ld, "], got ",
              latent.defined() ? shape_str(latent.shape()) : std::string("nothing"));
  // SAAudioFeatureExtractor.decode rescales by std 1, mean 0 and the VAE
  // bottleneck decode is the identity: the latent enters the decoder as is.
  Tensor z = latent.is_contiguous() ? latent : latent.clone();
  z = to_backend(*be_, z.reshape({z.size(-2), ld}));
  auto emit = [&](const std::string& name, const Tensor& t) {
    if (dump) dump(name, to_host(*be_, t));
  };

  const OobleckDecoderWeights& w = weights_;
  Tensor x = conv(w.conv_in, z);  // [L, C_top]
  emit("dec_layer0", x);
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    const OobleckDecoderBlock& blk = w.blocks[b];
    snake(blk.snake, x, x);  // the block input is not needed afterwards
    x = conv_transpose(blk.upsample, x);  // [L * s, C_out]
    Tensor t1 = be_->alloc(x.shape(), DType::F32), t2 = be_->alloc(x.shape(), DType::F32);
    for (const OobleckResidualUnit& ru : blk.res) {
      snake(ru.snake1, x, t1);
      be_->conv1d({.x = t1, .w = ru.conv1.w, .bias = ru.conv1.bias, .y = t2, .padding = ru.conv1.padding,
                   .dilation = ru.conv1.dilation});
      snake(ru.snake2, t2, t2);
      conv(ru.conv2, t2, x);  // x = conv2(...) + x, in place
    }
    emit("dec_layer" + std::to_string(b + 1), x);
  }
  snake(w.snake_out, x, x);
  Tensor y = conv(w.conv_out, x);  // [N, io_channels]; final_tanh is false: no squashing
  emit("waveform", y);
  return to_host(*be_, y);
}

Tensor OobleckDecoder::decode(const Tensor& latent, const OobleckDump& dump) const {
  Tensor wave = decode_waveform(latent, dump);
  return fourier_resample(wave, wave.size(0) * kAudioResampleNum / kAudioResampleDen);
}

}  // namespace magi2
