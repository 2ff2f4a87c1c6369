// The remote protocol's decoders on garbage: random bytes, truncated and bit-flipped valid
// messages, lengths that lie. Every one must be refused or answered, never read out of bounds
// (the sanitize build checks that) and never reach the driver with a buffer shorter than the
// arguments say. The worker's decoders run with no driver loaded (g_driver all NULL), so a
// request that decodes is answered CUDA_ERROR_NOT_SUPPORTED.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "calls.h"
#include "dispatch.h"
#include "launch.h"
#include "token.h"
#include "wire.h"

namespace gslice::remote {
namespace {

std::vector<uint8_t> Bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

int32_t ResultOf(const Writer& out) {
  int32_t r;
  EXPECT_GE(out.size(), sizeof r);
  std::memcpy(&r, out.buffer().data(), sizeof r);
  return r;
}

TEST(RemoteWire, ReaderNeverReadsPastItsSpan) {
  const uint8_t data[6] = {1, 2, 3, 4, 5, 6};
  Reader r(data, sizeof data);
  uint32_t v = 0;
  EXPECT_TRUE(r.Get(&v));
  uint32_t w = 0;
  EXPECT_FALSE(r.Get(&w));  // 2 bytes left
  const uint8_t* p = nullptr;
  EXPECT_FALSE(r.GetBytes(1, &p));  // failed once: fails from then on
  EXPECT_FALSE(r.AtEnd());
  Reader lie(data, sizeof data);
  EXPECT_FALSE(lie.GetBytes(~0ull, &p));
  std::string s;
  Reader str(data, sizeof data);  // declares a 0x04030201-byte string
  EXPECT_FALSE(str.GetString(kMaxString, &s));
}

TEST(RemoteWire, HeaderLengthIsBounded) {
  uint8_t h[kHeaderSize];
  EncodeHeader(FrameHeader{.length = kMaxFrame + 1, .seq = 7, .op = 3}, h);
  FrameHeader out;
  EXPECT_FALSE(DecodeHeader(h, kMaxFrame, &out));
  EncodeHeader(FrameHeader{.length = 16, .seq = 7, .op = 3}, h);
  ASSERT_TRUE(DecodeHeader(h, kMaxFrame, &out));
  EXPECT_EQ(out.seq, 7u);
  EXPECT_EQ(out.op, 3u);
}

TEST(RemoteWire, HelloRoundTripsAndRefusesGarbage) {
  Writer w;
  EncodeHello(Hello{.calls_hash = kCallsHash, .memory = "2GiB", .compute = "30%", .share = "", .slice_class = "opportunistic",
                    .idle_timeout = "30m", .host = "laptop"},
              &w);
  Reader r(w.buffer().data(), w.size());
  Hello h;
  std::string error;
  ASSERT_TRUE(DecodeHello(&r, &h, &error)) << error;
  EXPECT_EQ(h.memory, "2GiB");
  EXPECT_EQ(h.compute, "30%");
  EXPECT_EQ(h.slice_class, "opportunistic");
  EXPECT_EQ(h.idle_timeout, "30m");
  EXPECT_EQ(h.host, "laptop");
  EXPECT_EQ(h.calls_hash, kCallsHash);

  // Every truncation, and every single-byte change of the magic or version, is refused.
  for (size_t n = 0; n < w.size(); ++n) {
    Reader t(w.buffer().data(), n);
    Hello ignored;
    EXPECT_FALSE(DecodeHello(&t, &ignored, &error)) << "truncated to " << n;
  }
  for (size_t at = 0; at < 6; ++at) {
    std::vector<uint8_t> bad = w.buffer();
    bad[at] ^= 0x40;
    Reader t(bad.data(), bad.size());
    Hello ignored;
    EXPECT_FALSE(DecodeHello(&t, &ignored, &error)) << "byte " << at;
  }
  // A control character in a string (it becomes a command-line argument on the server).
  Writer nl;
  EncodeHello(Hello{.calls_hash = kCallsHash, .memory = "2GiB\n--gpus", .compute = "", .share = "", .slice_class = "",
                    .idle_timeout = "", .host = ""},
              &nl);
  Reader t(nl.buffer().data(), nl.size());
  EXPECT_FALSE(DecodeHello(&t, &h, &error));
  // Trailing bytes.
  Writer more;
  EncodeHello(Hello{.calls_hash = 1, .memory = "1GiB", .compute = "", .share = "", .slice_class = "", .idle_timeout = "",
                    .host = ""},
              &more);
  more.Put<uint8_t>(0);
  Reader m(more.buffer().data(), more.size());
  EXPECT_FALSE(DecodeHello(&m, &h, &error));
  // Random bytes.
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000; ++i) {
    auto junk = Bytes(rng, rng() % 64);
    Reader j(junk.data(), junk.size());
    DecodeHello(&j, &h, &error);
    HelloReply reply;
    Reader k(junk.data(), junk.size());
    DecodeHelloReply(&k, &reply, &error);
  }
}

TEST(RemoteWire, HelloCarriesWhetherTheClientRecordsATimeline) {
  for (bool trace : {false, true}) {
    Writer w;
    EncodeHello(Hello{.calls_hash = kCallsHash, .memory = "1GiB", .compute = "", .share = "", .slice_class = "",
                      .idle_timeout = "", .host = "h", .trace = trace}, &w);
    Reader r(w.buffer().data(), w.size());
    Hello h;
    std::string error;
    ASSERT_TRUE(DecodeHello(&r, &h, &error)) << error;
    EXPECT_EQ(h.trace, trace);
  }
  // The flag is 0 or 1, nothing else.
  Writer w;
  EncodeHello(Hello{.calls_hash = kCallsHash, .memory = "1GiB", .compute = "", .share = "", .slice_class = "",
                      .idle_timeout = "", .host = "h", .trace = true}, &w);
  std::vector<uint8_t> bad = w.buffer();
  bad.back() = 2;
  Reader r(bad.data(), bad.size());
  Hello h;
  std::string error;
  EXPECT_FALSE(DecodeHello(&r, &h, &error));
}

TEST(RemoteWire, ATraceFetchReplyRoundTripsAndItsBoundsAreChecked) {
  const std::vector<ServeRecord> served = {{.seq = 7, .op = 3, .lane = 1, .tid = 99, .start = 10, .end = 20},
                                           {.seq = 8, .op = 4, .lane = 0, .tid = 98, .start = 30, .end = 35}};
  const std::string part = "gslice-trace-part 1\nP 5 1 2 0 \"s\" \"n\"\n";
  Writer w;
  EncodeTraceFetchReply(3, served, part, &w);
  Reader r(w.buffer().data(), w.size());
  uint64_t dropped = 0;
  std::vector<ServeRecord> got;
  std::string text;
  ASSERT_TRUE(DecodeTraceFetchReply(&r, &dropped, &got, &text));
  EXPECT_EQ(dropped, 3u);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].seq, 8u);
  EXPECT_EQ(got[0].tid, 99u);
  EXPECT_EQ(got[0].end, 20);
  EXPECT_EQ(text, part);
  // Every truncation, and trailing bytes, are refused.
  for (size_t n = 0; n < w.size(); ++n) {
    Reader t(w.buffer().data(), n);
    EXPECT_FALSE(DecodeTraceFetchReply(&t, &dropped, &got, &text)) << "truncated to " << n;
  }
  std::vector<uint8_t> more = w.buffer();
  more.push_back(0);
  Reader m(more.data(), more.size());
  EXPECT_FALSE(DecodeTraceFetchReply(&m, &dropped, &got, &text));
  // A count or a length past the bounds is refused before anything is allocated for it.
  Writer huge_count;
  huge_count.Put<uint64_t>(0);
  huge_count.Put<uint32_t>(kMaxServeRecords + 1);
  Reader hc(huge_count.buffer().data(), huge_count.size());
  EXPECT_FALSE(DecodeTraceFetchReply(&hc, &dropped, &got, &text));
  Writer huge_part;
  huge_part.Put<uint64_t>(0);
  huge_part.Put<uint32_t>(0);
  huge_part.Put<uint64_t>(kMaxTracePart + 1);
  Reader hp(huge_part.buffer().data(), huge_part.size());
  EXPECT_FALSE(DecodeTraceFetchReply(&hp, &dropped, &got, &text));
  // Random bytes never read out of bounds.
  std::mt19937_64 rng(2);
  for (int i = 0; i < 2000; ++i) {
    auto junk = Bytes(rng, rng() % 96);
    Reader j(junk.data(), junk.size());
    DecodeTraceFetchReply(&j, &dropped, &got, &text);
  }
}

TEST(RemoteWire, ARequestPrefixWithALaneOutOfRangeIsRefused) {
  Writer w;
  EncodeRequestPrefix(RequestPrefix{.context = 0x1234, .lane = kMaxLanes - 1}, &w);
  Reader r(w.buffer().data(), w.size());
  RequestPrefix p;
  ASSERT_TRUE(DecodeRequestPrefix(&r, &p));
  EXPECT_EQ(p.context, 0x1234u);
  EXPECT_EQ(p.lane, kMaxLanes - 1);
  Writer bad;
  EncodeRequestPrefix(RequestPrefix{.context = 0, .lane = kMaxLanes}, &bad);
  Reader b(bad.buffer().data(), bad.size());
  EXPECT_FALSE(DecodeRequestPrefix(&b, &p));
  Reader short_one(w.buffer().data(), kRequestPrefixSize - 1);
  EXPECT_FALSE(DecodeRequestPrefix(&short_one, &p));
}

TEST(RemoteToken, OnlyTheSameBytesAreEqual) {
  const std::string token = "0123456789abcdef0123";
  auto equals = [&](const std::string& got) {
    return TokenEquals(token, reinterpret_cast<const uint8_t*>(got.data()), got.size());
  };
  EXPECT_TRUE(equals(token));
  EXPECT_FALSE(equals(""));
  EXPECT_FALSE(equals(token.substr(0, token.size() - 1)));
  EXPECT_FALSE(equals(token + "4"));
  for (size_t i = 0; i < token.size(); ++i) {
    std::string flipped = token;
    flipped[i] = static_cast<char>(flipped[i] ^ 1);
    EXPECT_FALSE(equals(flipped)) << i;
  }
  EXPECT_FALSE(TokenEquals("", nullptr, 0));
}

TEST(RemoteToken, TokenFilesAreSecretAndLongEnough) {
  const std::string path = "/tmp/gslice-test-" + std::to_string(getpid()) + "-token";
  auto write = [&](const std::string& text, mode_t mode) {
    unlink(path.c_str());
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
  };
  std::string token, error;
  write("  0123456789abcdef0123456789abcdef \nsecond line\n", 0600);
  ASSERT_TRUE(ReadTokenFile(path, &token, &error)) << error;
  EXPECT_EQ(token, "0123456789abcdef0123456789abcdef");
  write("0123456789abcdef0123456789abcdef\n", 0640);
  EXPECT_FALSE(ReadTokenFile(path, &token, &error));
  EXPECT_NE(error.find("chmod 600"), std::string::npos) << error;
  write("short\n", 0600);
  EXPECT_FALSE(ReadTokenFile(path, &token, &error));
  EXPECT_NE(error.find("16 to"), std::string::npos) << error;
  unlink(path.c_str());
  EXPECT_FALSE(ReadTokenFile(path, &token, &error));
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
}

TEST(RemoteDispatch, UnknownOpcodesAreNotAnswered) {
  Writer out;
  Reader in;
  EXPECT_EQ(Dispatch(kOpCount, in, out), Dispatched::kUnknownOp);
  EXPECT_EQ(Dispatch(0xffffffffu, in, out), Dispatched::kUnknownOp);
  EXPECT_EQ(Dispatch(kOp_cuCtxSetCurrent, in, out), Dispatched::kUnknownOp);  // answered on the client
  EXPECT_EQ(out.size(), 0u);
}

TEST(RemoteDispatch, ABufferShorterThanItsArgumentsSayIsRefused) {
  // cuMemcpyHtoD_v2(dst, src: in[ByteCount], ByteCount) with 16 bytes sent but ByteCount 1 MiB:
  // the driver would read past the buffer.
  Writer req;
  req.Put<CUdeviceptr>(0x1000);
  req.Put<uint8_t>(1);
  req.Put<uint64_t>(16);
  req.PadTo(16);
  const uint8_t data[16] = {};
  req.PutBytes(data, sizeof data);
  req.Put<size_t>(1 << 20);
  Reader in(req.buffer().data(), req.size());
  Writer out;
  EXPECT_EQ(Dispatch(kOp_cuMemcpyHtoD_v2, in, out), Dispatched::kRefused);
  EXPECT_EQ(ResultOf(out), CUDA_ERROR_INVALID_VALUE);

  // The same with matching lengths decodes (and finds no driver here).
  Writer ok;
  ok.Put<CUdeviceptr>(0x1000);
  ok.Put<uint8_t>(1);
  ok.Put<uint64_t>(16);
  ok.PadTo(16);
  ok.PutBytes(data, sizeof data);
  ok.Put<size_t>(16);
  Reader in2(ok.buffer().data(), ok.size());
  Writer out2;
  EXPECT_EQ(Dispatch(kOp_cuMemcpyHtoD_v2, in2, out2), Dispatched::kAnswered);
  EXPECT_EQ(ResultOf(out2), CUDA_ERROR_NOT_SUPPORTED);

  // A device-to-host copy asking for more than one call carries.
  Writer big;
  big.Put<uint8_t>(1);
  big.Put<uint64_t>(kMaxBuffer + 1);
  big.Put<CUdeviceptr>(0x1000);
  big.Put<size_t>(kMaxBuffer + 1);
  Reader in3(big.buffer().data(), big.size());
  Writer out3;
  EXPECT_EQ(Dispatch(kOp_cuMemcpyDtoH_v2, in3, out3), Dispatched::kRefused);
}

// A launch as the client writes it (launch.h) decodes on the worker, and every count or part
// over its limit is refused before anything is read through it.
TEST(RemoteDispatch, ALaunchInTheSharedFormatDecodesAndItsLimitsHold) {
  auto launch = [](uint32_t num_attrs, uint32_t count, uint8_t which_override) {
    Writer w;
    static const CUlaunchAttribute kAttrs[kMaxLaunchAttributes + 1] = {};
    EncodeLaunchConfig(LaunchConfig{.f = reinterpret_cast<CUfunction>(0x10),
                                    .dims = {1, 1, 1, 32, 1, 1, 0},
                                    .stream = nullptr,
                                    .num_attrs = num_attrs,
                                    .attrs = kAttrs},
                       &w);
    int value = 7;
    std::vector<void*> params(count, &value);
    std::vector<uint32_t> sizes(count, sizeof value);
    EXPECT_TRUE(EncodeLaunchParams(params.data(), sizes.data(), count, nullptr, 0, &w));
    if (which_override != 0) w.buffer()[w.size() - (count == 0 ? 4 : 4 + count * 8) - 1] = which_override;
    return w;
  };
  auto serve = [](uint32_t op, const Writer& req) {
    Reader in(req.buffer().data(), req.size());
    Writer out;
    const Dispatched d = Dispatch(op, in, out);
    return std::make_pair(d, d == Dispatched::kAnswered ? ResultOf(out) : 0);
  };
  // Well formed: decodes, and finds no driver here.
  EXPECT_EQ(serve(kOp_cuLaunchKernel, launch(0, 2, 0)).second, CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(serve(kOp_cuLaunchKernelEx, launch(kMaxLaunchAttributes, 2, 0)).second, CUDA_ERROR_NOT_SUPPORTED);
  // Too many attributes, too many parameters, a part that does not exist.
  EXPECT_EQ(serve(kOp_cuLaunchKernelEx, launch(kMaxLaunchAttributes + 1, 2, 0)).first, Dispatched::kRefused);
  EXPECT_EQ(serve(kOp_cuLaunchKernel, launch(0, kMaxKernelParams + 1, 0)).first, Dispatched::kRefused);
  EXPECT_EQ(serve(kOp_cuLaunchKernel, launch(0, 2, 4)).first, Dispatched::kRefused);

  // The cluster queries carry the configuration alone; a parameter part after it is refused.
  Writer query;
  EncodeLaunchConfig(LaunchConfig{.f = reinterpret_cast<CUfunction>(0x10), .dims = {1, 1, 1, 32, 1, 1, 0}}, &query);
  EXPECT_EQ(serve(kOp_cuOccupancyMaxActiveClusters, query).second, CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(serve(kOp_cuOccupancyMaxActiveClusters, launch(0, 1, 0)).first, Dispatched::kRefused);

  // Decoding what was encoded gives it back.
  const Writer w = launch(1, 3, 0);
  Reader r(w.buffer().data(), w.size());
  LaunchConfig c;
  std::vector<CUlaunchAttribute> attrs;
  LaunchParams p;
  ASSERT_TRUE(DecodeLaunchConfig(&r, &c, &attrs));
  ASSERT_TRUE(DecodeLaunchParams(&r, &p));
  EXPECT_TRUE(r.AtEnd());
  EXPECT_EQ(c.f, reinterpret_cast<CUfunction>(0x10));
  EXPECT_EQ(c.dims[3], 32u);
  EXPECT_EQ(c.num_attrs, 1u);
  EXPECT_EQ(p.which, kLaunchKernelParams);
  ASSERT_EQ(p.params.size(), 3u);
  int got = 0;
  ASSERT_EQ(p.params[2].second, sizeof got);
  std::memcpy(&got, p.params[2].first, sizeof got);
  EXPECT_EQ(got, 7);
}

TEST(RemoteDispatch, NvmlCallsAreAnsweredInNvmlsOwnCodes) {
  // No NVML loaded (as on a node without one): NVML_ERROR_NOT_SUPPORTED, not a CUresult.
  Writer count;
  count.Put<uint8_t>(1);  // deviceCount wanted
  Reader in(count.buffer().data(), count.size());
  Writer out;
  EXPECT_EQ(Dispatch(kOp_nvmlDeviceGetCount_v2, in, out), Dispatched::kAnswered);
  EXPECT_EQ(ResultOf(out), 3);  // NVML_ERROR_NOT_SUPPORTED
  // A malformed one: NVML_ERROR_INVALID_ARGUMENT.
  Writer bad;
  bad.Put<uint8_t>(7);
  Reader in2(bad.buffer().data(), bad.size());
  Writer out2;
  EXPECT_EQ(Dispatch(kOp_nvmlDeviceGetCount_v2, in2, out2), Dispatched::kRefused);
  EXPECT_EQ(ResultOf(out2), 2);  // NVML_ERROR_INVALID_ARGUMENT
}

TEST(RemoteDispatch, RandomAndTruncatedRequestsNeverCrash) {
  std::mt19937_64 rng(42);
  for (uint32_t op = 0; op < kOpCount; ++op) {
    for (int i = 0; i < 300; ++i) {
      // Mostly small buffer lengths, so that decodable requests stay cheap.
      std::vector<uint8_t> junk = Bytes(rng, rng() % 96);
      for (size_t k = 0; k + 8 <= junk.size(); k += 8) {
        if (rng() % 2 == 0) {
          const uint64_t small = rng() % 32;
          std::memcpy(junk.data() + k, &small, sizeof small);
        }
      }
      Reader in(junk.data(), junk.size());
      Writer out;
      const Dispatched d = Dispatch(op, in, out);
      if (kOpKinds[op] == CallKind::kLocal) {
        EXPECT_EQ(d, Dispatched::kUnknownOp);
        continue;
      }
      ASSERT_GE(out.size(), 4u) << kOpNames[op];
      if (d == Dispatched::kRefused) {
        EXPECT_EQ(ResultOf(out), kOpLibrary[op] == Library::kNvml ? 2 /* NVML_ERROR_INVALID_ARGUMENT */
                                                                   : CUDA_ERROR_INVALID_VALUE)
            << kOpNames[op];
      }
    }
  }
}

}  // namespace
}  // namespace gslice::remote
