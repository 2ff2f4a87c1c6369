// The merge of per-process parts into one trace file (gslice/trace_format.h).
#include "gslice/trace_format.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace gslice {
namespace {

using nlohmann::json;

TEST(TraceMerge, PartsShareOneClockWhoseZeroIsTheEarliestStart) {
  const std::string a = std::string(kTracePartMagic) +
                        "\nP 10 5000000 1700000000000000000 2 \"train\" \"cupti /x/libcupti.so\"\n"
                        "M {\"ph\":\"M\",\"name\":\"process_name\",\"pid\":10,\"args\":{\"name\":\"a (slice train)\"}}\n"
                        "E 5001500 2500 \"ph\":\"X\",\"cat\":\"api\",\"name\":\"cuLaunchKernel\",\"pid\":10,\"tid\":10\n";
  const std::string b = std::string(kTracePartMagic) +
                        "\nP 11 4000000 1699999999999000000 1 \"train\" \"unavailable: none\"\n"
                        "E 4000000 -1 \"ph\":\"i\",\"s\":\"t\",\"cat\":\"nvtx\",\"name\":\"m\",\"pid\":11,\"tid\":11\n"
                        "E 4000010 7 \"ph\":\"X\",\"cat\":\"nvtx\",\"name\":\"torn\n";  // cut by a kill
  TraceMergeResult r;
  const json t = json::parse(MergeTraceParts({a, b, "not a part"}, "", &r));
  EXPECT_EQ(r.parts, 2);
  EXPECT_EQ(r.events, 2);
  EXPECT_EQ(r.dropped, 3);
  EXPECT_EQ(t["otherData"]["gslice"]["slice"], "train");
  EXPECT_EQ(t["otherData"]["gslice"]["started_unix_ns"], 1699999999999000000);
  EXPECT_EQ(t["otherData"]["gslice"]["dropped_events"], 3);
  EXPECT_EQ(t["displayTimeUnit"], "ns");
  ASSERT_EQ(t["traceEvents"].size(), 3u);
  const json& launch = t["traceEvents"][1];
  EXPECT_EQ(launch["name"], "cuLaunchKernel");
  EXPECT_DOUBLE_EQ(launch["ts"].get<double>(), 1001.5);  // (5001500 - 4000000) ns
  EXPECT_DOUBLE_EQ(launch["dur"].get<double>(), 2.5);
  const json& mark = t["traceEvents"][2];
  EXPECT_DOUBLE_EQ(mark["ts"].get<double>(), 0);
  EXPECT_FALSE(mark.contains("dur"));
}

TEST(TraceMerge, APartOnAnotherHostsClockIsPutOnTheFilesClockByItsClockLine) {
  // The client's part, and its worker's, whose clock runs 1 s ahead (offset -1 s, +- 5 us).
  const std::string client = std::string(kTracePartMagic) +
                             "\nP 10 5000000 1700000000000000000 0 \"\" \"none: a remote client\"\n"
                             "E 5002000 10000 \"ph\":\"X\",\"cat\":\"remote\",\"name\":\"cuMemAlloc_v2\",\"pid\":10,\"tid\":10\n";
  const std::string worker = std::string(kTracePartMagic) +
                             "\nP 20 1005001000 1700000000001000000 0 \"remote-7\" \"cupti x\"\n"
                             "C -1000000000 5000\n"
                             "E 1005004000 3000 \"ph\":\"X\",\"cat\":\"remote\",\"name\":\"serve\",\"pid\":20,\"tid\":21\n";
  TraceMergeResult r;
  const json t = json::parse(MergeTraceParts({worker, client}, "", &r));
  EXPECT_EQ(r.parts, 2);
  EXPECT_EQ(r.aligned_parts, 1);
  EXPECT_EQ(t["otherData"]["gslice"]["slice"], "remote-7");
  EXPECT_EQ(t["otherData"]["gslice"]["clock_uncertainty_ns"], 5000);
  EXPECT_EQ(t["otherData"]["gslice"]["started_unix_ns"], 1700000000000000000);
  ASSERT_EQ(t["traceEvents"].size(), 2u);
  const json& serve = t["traceEvents"][0];
  const json& call = t["traceEvents"][1];
  EXPECT_DOUBLE_EQ(call["ts"].get<double>(), 2.0);   // 5002000 - 5000000 ns
  EXPECT_DOUBLE_EQ(serve["ts"].get<double>(), 4.0);  // 1005004000 - 1 s - 5000000 ns
  const json& procs = t["otherData"]["gslice"]["processes"];
  EXPECT_EQ(procs[0]["clock"]["offset_ns"], -1000000000);
  EXPECT_EQ(procs[0]["clock"]["uncertainty_ns"], 5000);
  EXPECT_FALSE(procs[1].contains("clock"));
  // With a drift: 1000 ppb (1 us per ms) from the reference on.
  const std::string drifting = std::string(kTracePartMagic) +
                               "\nP 20 1005001000 1700000000001000000 0 \"remote-7\" \"cupti x\"\n"
                               "C -1000000000 5000 1002004000 1000000.000\n"
                               "E 1005004000 3000 \"ph\":\"X\",\"cat\":\"remote\",\"name\":\"serve\",\"pid\":20,\"tid\":21\n";
  const json d = json::parse(MergeTraceParts({drifting, client}, "", &r));
  const json& late = d["traceEvents"][0];
  // 1005004000 - 1 s + 3 us of drift over its 3 ms past the reference, - 5000000 ns.
  EXPECT_DOUBLE_EQ(late["ts"].get<double>(), 7.0);
  EXPECT_DOUBLE_EQ(late["dur"].get<double>(), 3.003);
  EXPECT_DOUBLE_EQ(d["otherData"]["gslice"]["processes"][0]["clock"]["drift_ppb"].get<double>(), 1000000.0);
  // A clock line that does not parse leaves its part out: its times would mislead.
  const std::string garbled = std::string(kTracePartMagic) + "\nP 20 1 2 0 \"s\" \"n\"\nC -1 x\n" +
                              "E 1 1 \"ph\":\"X\",\"cat\":\"remote\",\"name\":\"serve\",\"pid\":20,\"tid\":21\n";
  const json g = json::parse(MergeTraceParts({garbled, client}, "", &r));
  EXPECT_EQ(r.parts, 1);
  EXPECT_EQ(g["traceEvents"].size(), 1u);
  EXPECT_FALSE(g["otherData"]["gslice"].contains("clock_uncertainty_ns"));
}

TEST(TraceMerge, NoPartsMakeAnEmptyTraceThatStillParses) {
  const json t = json::parse(MergeTraceParts({}, "idle"));
  EXPECT_TRUE(t["traceEvents"].empty());
  EXPECT_EQ(t["otherData"]["gslice"]["slice"], "idle");
  EXPECT_EQ(t["otherData"]["gslice"]["version"], 1);
}

TEST(TraceMerge, NamesAreEscaped) {
  EXPECT_EQ(TraceJsonString("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  // The streaming writer the shim uses writes the same bytes.
  std::string streamed;
  PutTraceJsonString("x\ty\x1f\xff", [&](const char* p, size_t n) { streamed.append(p, n); });
  EXPECT_EQ(streamed, TraceJsonString("x\ty\x1f\xff"));
  EXPECT_EQ(streamed, "\"x\\ty\\u001f\xff\"");
}

// What the writers write, the reader reads back.
TEST(TracePart, HeaderAndClockLineRoundTrip) {
  const TracePartHeader head{.pid = 42, .started_mono_ns = 5, .started_unix_ns = 6, .dropped = 7,
                             .slice_json = TraceJsonString("tr \"a\""), .note_json = TraceJsonString("cupti")};
  const std::string text = TracePartHead(head) + TracePartClockLine({.offset_ns = -3, .uncertainty_ns = 2,
                                                                      .reference_ns = 9, .drift_ppb = 1.5}) +
                           "E 1 2 \"ph\":\"X\"\n";
  TracePartHeader back;
  size_t body = 0;
  ASSERT_TRUE(ParseTracePartHead(text, &back, &body));
  EXPECT_EQ(back.pid, 42);
  EXPECT_EQ(back.started_mono_ns, 5);
  EXPECT_EQ(back.started_unix_ns, 6);
  EXPECT_EQ(back.dropped, 7);
  EXPECT_EQ(back.slice_json, head.slice_json);
  EXPECT_EQ(back.note_json, "\"cupti\"");
  const size_t nl = text.find('\n', body);
  TracePartClock clock;
  ASSERT_TRUE(ParseTracePartClockLine(std::string_view(text).substr(body, nl - body), &clock));
  EXPECT_EQ(clock.offset_ns, -3);
  EXPECT_EQ(clock.uncertainty_ns, 2);
  EXPECT_EQ(clock.reference_ns, 9);
  EXPECT_DOUBLE_EQ(clock.drift_ppb, 1.5);
  // A header cut short or with a bare word for the slice is not a header.
  EXPECT_FALSE(ParseTracePartHead(text.substr(0, body - 1), &back, &body));
  EXPECT_FALSE(ParseTracePartHead(std::string(kTracePartMagic) + "\nP 1 2 3 4 tr \"n\"\n", &back, &body));
  EXPECT_FALSE(ParseTracePartClockLine("C 1", &clock));
}

std::string Event(int i) {
  return "E " + std::to_string(1000 + i) + " 5 \"ph\":\"X\",\"cat\":\"api\",\"name\":\"call " + std::to_string(i) +
         "\",\"pid\":7,\"tid\":7\n";
}

std::string Head(int pid) {
  return TracePartHead({.pid = pid, .started_mono_ns = 1000, .started_unix_ns = 5, .dropped = 0,
                        .slice_json = "\"s\"", .note_json = "\"n\""});
}

// A merge bounded in size leaves out the events that would pass the bound, says how many, and
// is still a whole file.
TEST(TraceMergeBounds, EventsPastTheOutputBoundAreLeftOutAndCounted) {
  std::string part = Head(7);
  for (int i = 0; i < 200; ++i) part += Event(i);
  TraceMergeResult unbounded;
  const std::string whole = MergeTraceParts({part}, "", &unbounded);
  ASSERT_EQ(unbounded.events, 200);
  EXPECT_EQ(unbounded.cut_events, 0);
  EXPECT_EQ(json::parse(whole)["otherData"]["gslice"].count("cut_events"), 0u);

  TraceMergeResult r;
  const std::string cut = MergeTraceParts({part}, "", &r, {.max_output_bytes = 4096});
  EXPECT_LE(cut.size(), 4096u);
  EXPECT_EQ(r.output_bytes, static_cast<int64_t>(cut.size()));
  EXPECT_GT(r.events, 0);
  EXPECT_GT(r.cut_events, 0);
  EXPECT_EQ(r.events + r.cut_events, 200);
  const json t = json::parse(cut);
  EXPECT_EQ(t["traceEvents"].size(), static_cast<size_t>(r.events));
  EXPECT_EQ(t["traceEvents"].back()["name"], "call " + std::to_string(r.events - 1)) << "the first ones are kept";
  EXPECT_EQ(t["otherData"]["gslice"]["cut_events"], r.cut_events);
  EXPECT_EQ(t["otherData"]["gslice"]["max_bytes"], 4096);
}

// A line longer than the bound is skipped, whatever it holds; the lines around it stand.
TEST(TraceMergeBounds, ALineLongerThanTheBoundIsSkipped) {
  const std::string part = Head(7) + Event(1) + "E 1 2 \"name\":\"" + std::string(300, 'x') + "\"\n" + Event(2);
  TraceMergeResult r;
  const json t = json::parse(MergeTraceParts({part}, "", &r, {.max_line_bytes = 200}));
  EXPECT_EQ(r.long_lines, 1);
  ASSERT_EQ(t["traceEvents"].size(), 2u);
  EXPECT_EQ(t["traceEvents"][1]["name"], "call 2");
}

// Parts in a folder (the slice owner's): only regular, single-linked files are read, streamed
// within the read bound, and a part of any size is never read past it.
class TraceFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gslice-trace-folder-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) { std::ofstream(dir_ + "/" + name) << text; }
  bool Merge(const TraceMergeLimits& limits, std::string* out, TraceMergeResult* r) {
    std::string error;
    const bool ok = MergeTracePartsInFolder(
        dir_, "s", -1, limits,
        [&](std::string_view piece) {
          out->append(piece);
          return true;
        },
        r, &error);
    EXPECT_TRUE(ok) << error;
    return ok;
  }
  std::string dir_;
};

TEST_F(TraceFolder, OnlyRegularSingleLinkedPartsAreRead) {
  Write("1.part", Head(1) + Event(1));
  ASSERT_EQ(symlink((dir_ + "/1.part").c_str(), (dir_ + "/2.part").c_str()), 0);
  ASSERT_EQ(mkfifo((dir_ + "/3.part").c_str(), 0600), 0);  // would block a reader that opened it
  Write("4.part", Head(4) + Event(4));
  ASSERT_EQ(link((dir_ + "/4.part").c_str(), (dir_ + "/4-again").c_str()), 0);
  Write("5.txt", Head(5) + Event(5));  // not a part
  std::string out;
  TraceMergeResult r;
  ASSERT_TRUE(Merge({}, &out, &r));
  EXPECT_EQ(r.parts, 1);
  EXPECT_EQ(r.parts_left_out, 3);
  const json t = json::parse(out);
  ASSERT_EQ(t["traceEvents"].size(), 1u);
  EXPECT_EQ(t["otherData"]["gslice"]["processes"][0]["pid"], 1);
  // Past max_parts, the rest are left out.
  std::filesystem::remove(dir_ + "/2.part");
  std::filesystem::remove(dir_ + "/3.part");
  std::filesystem::remove(dir_ + "/4-again");
  out.clear();
  ASSERT_TRUE(Merge({.max_parts = 1}, &out, &r));
  EXPECT_EQ(r.parts, 1);
  EXPECT_EQ(r.parts_left_out, 1);
}

TEST_F(TraceFolder, AHugePartIsReadOnlyUpToTheReadBound) {
  // A header, an event, then a GiB of zeros without a newline (sparse: nothing on disk).
  Write("9.part", Head(9) + Event(9));
  ASSERT_EQ(truncate((dir_ + "/9.part").c_str(), int64_t{1} << 30), 0);
  std::string out;
  TraceMergeResult r;
  ASSERT_TRUE(Merge({.max_read_bytes = 4 << 20}, &out, &r));
  EXPECT_TRUE(r.read_cut);
  EXPECT_LE(r.bytes_read, 4 << 20);
  const json t = json::parse(out);
  ASSERT_EQ(t["traceEvents"].size(), 1u);
  EXPECT_EQ(t["traceEvents"][0]["name"], "call 9");
}

}  // namespace
}  // namespace gslice
