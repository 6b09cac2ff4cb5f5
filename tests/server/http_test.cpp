// The HTTP server in-process on loopback (tiny fixture + byte tokenizer): endpoints, OpenAI-style errors
// for every kind of bad input, slow and vanishing clients, and no state left behind afterwards.
#include "server/http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/http_server.h"

namespace di::server {
namespace {

using json = nlohmann::json;

// The tiny fp32 fixture with the byte tokenizer, as every server test here runs it.
EngineOptions tiny_engine() {
    EngineOptions eo;
    eo.model_dir = std::string(DI_TEST_DATA) + "/v4_tiny_fp32";
    eo.tokenizer_path = std::string(DI_SOURCE_DIR) + "/tests/e2e/data/tiny_tokenizer";
    return eo;
}

class HttpTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        EngineOptions eo = tiny_engine();
        eo.max_context = 256;
        eo.max_running = 4;
        eo.max_waiting = 2;
        auto e = Engine::create(eo);
        ASSERT_TRUE(e.ok()) << e.error().message;
        engine_ = std::move(*e).release();
        ServerOptions so;
        so.port = 0;
        so.served_model_name = "tiny";
        so.max_body_bytes = 64 * 1024;
        so.read_timeout_s = 1;
        so.default_max_tokens = 8;
        server_ = new HttpServer(*engine_, so);
        ASSERT_TRUE(server_->bind().ok());
        thread_ = new std::thread([] { (void)server_->run(); });
    }
    static void TearDownTestSuite() {
        server_->stop();
        thread_->join();
        delete thread_;
        delete server_;
        delete engine_;
    }

    httplib::Client client() {
        httplib::Client c("127.0.0.1", server_->port());
        c.set_read_timeout(60, 0);
        return c;
    }
    httplib::Result post(const std::string& path, const std::string& body) {
        return client().Post(path, body, "application/json");
    }
    // Waits until the engine holds no request and no state.
    static bool engine_idle() {
        for (int i = 0; i < 500; ++i) {
            EngineStats s = engine_->stats();
            if (s.n_running == 0 && s.n_waiting == 0 && s.state_bytes_allocated == 0 &&
                s.state_bytes_reserved == 0)
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return false;
    }
    static void expect_error(const httplib::Result& r, int status, const std::string& param = "?") {
        ASSERT_TRUE(r) << "no response";
        EXPECT_EQ(r->status, status) << r->body;
        auto j = json::parse(r->body, nullptr, false);
        ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
        EXPECT_TRUE(j["error"]["message"].is_string());
        EXPECT_TRUE(j["error"]["type"].is_string());
        if (param != "?") {
            EXPECT_EQ(j["error"]["param"], param == "" ? json(nullptr) : json(param)) << r->body;
        }
    }
    // A raw TCP connection, for clients that misbehave below HTTP.
    static int connect_raw() {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(server_->port()));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        return fd;
    }

    static Engine* engine_;
    static HttpServer* server_;
    static std::thread* thread_;
};

Engine* HttpTest::engine_ = nullptr;
HttpServer* HttpTest::server_ = nullptr;
std::thread* HttpTest::thread_ = nullptr;

const std::string kHello = R"({"model": "tiny", "messages": [{"role": "user", "content": "hello"}], )";

TEST_F(HttpTest, HealthModelsMetrics) {
    auto h = client().Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    auto m = client().Get("/v1/models");
    ASSERT_TRUE(m);
    auto j = json::parse(m->body);
    EXPECT_EQ(j["data"][0]["id"], "tiny");
    EXPECT_EQ(j["data"][0]["max_model_len"], 256);
    auto x = client().Get("/metrics");
    ASSERT_TRUE(x);
    for (const char* name :
         {"deepinfer_time_to_first_token_seconds_bucket", "deepinfer_inter_token_latency_seconds",
          "deepinfer_running_requests", "deepinfer_waiting_requests",
          "deepinfer_state_memory_bytes{kind=\"free\"}", "deepinfer_generation_tokens_total",
          "deepinfer_state_memory_bytes{kind=\"prefix_cache\"}", "deepinfer_prefix_cache_hit_tokens_total",
          "deepinfer_process_memory_bytes{kind=\"resident\"}"})
        EXPECT_NE(x->body.find(name), std::string::npos) << name;
    expect_error(client().Get("/v1/nope"), 404);
    expect_error(client().Get("/v1/models/other"), 404, "model");
}

TEST_F(HttpTest, ChatCompletionWholeAndUsage) {
    auto r =
        post("/v1/chat/completions", kHello + R"("max_tokens": 5, "temperature": 0, "ignore_eos": true})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    auto j = json::parse(r->body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["completion_tokens"], 5);
    EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 5);
    EXPECT_EQ(j["usage"]["total_tokens"].get<int>(),
              j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
}

TEST_F(HttpTest, CompletionTokenPromptMatchesTheEngine) {
    // Same request through HTTP and directly through the engine: identical tokens (logprobs carry the ids'
    // bytes, so compare the text the byte tokenizer gives for the engine's ids).
    auto r = post("/v1/completions",
                  R"({"model": "tiny", "prompt": [37, 5, 162, 57], "max_tokens": 6, "temperature": 0,
                      "ignore_eos": true, "skip_special_tokens": false})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    auto j = json::parse(r->body);
    Request q;
    q.prompt = {37, 5, 162, 57};
    q.sampling.temperature = 0;
    q.stop.max_tokens = 6;
    q.stop.ignore_eos = true;
    q.stop.skip_special = false;
    auto s = engine_->submit(q);
    ASSERT_TRUE(s.ok());
    std::vector<int32_t> ids;
    for (;;) {
        auto e = (*s)->next(std::chrono::milliseconds(30000));
        ASSERT_TRUE(e);
        for (auto& t : e->tokens) ids.push_back(t.id);
        if (e->finished) break;
    }
    auto text = engine_->tokenizer()->decode(ids);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(j["choices"][0]["text"].get<std::string>(), *text);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
}

// The same 150-token prompt twice: the second starts from the state the first kept at its last 128-token
// chunk boundary (the reference backend's chunk), says so in OpenAI's prompt_tokens_details, and answers the
// same text; a salted request shares states only with its salt (vLLM's cache_salt).
TEST_F(HttpTest, UsageCountsPromptTokensFromThePrefixCache) {
    json prompt = json::array();
    for (int i = 0; i < 150; ++i) prompt.push_back(2 + (i * 37 + 11) % 250);
    const std::string body = json{
        {"model", "tiny"},
        {"prompt", prompt},
        {"max_tokens", 4},
        {"temperature", 0},
        {"ignore_eos", true}}.dump();
    std::vector<json> got;
    for (int i = 0; i < 2; ++i) {
        auto r = post("/v1/completions", body);
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        got.push_back(json::parse(r->body));
    }
    EXPECT_EQ(got[0]["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(got[1]["usage"]["prompt_tokens_details"]["cached_tokens"], 128);
    EXPECT_EQ(got[1]["usage"]["prompt_tokens"], 150);
    EXPECT_EQ(got[0]["choices"][0]["text"], got[1]["choices"][0]["text"]);
    // with a cache_salt only requests of the same salt share states
    json salted = json::parse(body);
    salted["cache_salt"] = "tenant-a";
    for (int64_t want : {0, 128}) {
        auto r = post("/v1/completions", salted.dump());
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        const json j = json::parse(r->body);
        EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], want);
        EXPECT_EQ(j["choices"][0]["text"], got[0]["choices"][0]["text"]);
    }
    salted["cache_salt"] = 7;
    expect_error(post("/v1/completions", salted.dump()), 400, "cache_salt");
    // dropped: the prompt is prefilled again
    auto reset = post("/reset_prefix_cache", "");
    ASSERT_TRUE(reset);
    ASSERT_EQ(reset->status, 200) << reset->body;
    EXPECT_GT(json::parse(reset->body)["states_dropped"].get<int>(), 0);
    EXPECT_GT(json::parse(reset->body)["bytes_freed"].get<int64_t>(), 0);
    auto cold = post("/v1/completions", body);
    ASSERT_TRUE(cold);
    EXPECT_EQ(json::parse(cold->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    // Anthropic's usage: input_tokens leave out the cache reads
    std::string text;
    for (int i = 0; text.size() < 180; ++i) text += "word" + std::to_string(i) + " ";
    const std::string msg =
        json{{"model", "tiny"}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", text}}}}}
            .dump();
    std::vector<json> usage;
    for (int i = 0; i < 2; ++i) {
        auto r = post("/v1/messages", msg);
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        usage.push_back(json::parse(r->body)["usage"]);
    }
    const int64_t n = usage[0]["input_tokens"].get<int64_t>();
    ASSERT_GT(n, 128);
    EXPECT_EQ(usage[0]["cache_read_input_tokens"], 0);
    EXPECT_EQ(usage[1]["cache_read_input_tokens"], 128);
    EXPECT_EQ(usage[1]["input_tokens"], n - 128);
}

// echo: the prompt comes back before the completion; with logprobs its tokens' logprobs too (the first
// null), those the engine computes for the prompt; max_tokens 0 only scores it (evaluation harnesses).
TEST_F(HttpTest, EchoReturnsThePromptAndItsLogprobs) {
    const std::vector<int32_t> ids = {37, 5, 162, 57, 107, 224, 174, 213, 193, 94, 236, 238};
    const std::string text = *engine_->tokenizer()->decode(ids);
    auto r = post(
        "/v1/completions",
        json{{"model", "tiny"}, {"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 2}}.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    const json& c = j["choices"][0];
    EXPECT_EQ(c["text"], text);
    EXPECT_EQ(c["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["completion_tokens"], 0);
    const json& lp = c["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), ids.size());
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    Request q;
    q.prompt = ids;
    q.stop.max_tokens = 0;
    q.prompt_logprobs = 2;
    auto s = engine_->submit(q);
    ASSERT_TRUE(s.ok());
    std::vector<GeneratedToken> want;
    for (;;) {
        auto e = (*s)->next(std::chrono::milliseconds(30000));
        ASSERT_TRUE(e);
        want.insert(want.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
        if (e->finished) break;
    }
    ASSERT_EQ(want.size(), ids.size() - 1);
    for (size_t i = 1; i < ids.size(); ++i) {
        EXPECT_EQ(lp["token_logprobs"][i].get<float>(), want[i - 1].logprob) << i;
        // an object by token text: two ids with the same text (bytes of a split character) share a key
        EXPECT_GE(lp["top_logprobs"][i].size(), 1u) << i;
        EXPECT_LE(lp["top_logprobs"][i].size(), 2u) << i;
    }
    // with a completion after it: the prompt's entries, then the generated ones
    r = post("/v1/completions", json{{"model", "tiny"},
                                     {"prompt", ids},
                                     {"max_tokens", 3},
                                     {"temperature", 0},
                                     {"ignore_eos", true},
                                     {"echo", true},
                                     {"logprobs", 0}}
                                    .dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json k = json::parse(r->body)["choices"][0];
    EXPECT_EQ(k["text"].get<std::string>().rfind(text, 0), 0u);
    EXPECT_GT(k["text"].get<std::string>().size(), text.size());
    EXPECT_EQ(k["logprobs"]["tokens"].size(), ids.size() + 3);
    EXPECT_EQ(k["logprobs"]["token_logprobs"][1].get<float>(), want[0].logprob);
    expect_error(post("/v1/completions", json{{"model", "tiny"}, {"prompt", ids}, {"max_tokens", 0}}.dump()),
                 400, "max_tokens");
    // vLLM's prompt_logprobs: per prompt token the token itself (logprob, rank) and its best alternatives
    r = post("/v1/completions",
             json{{"model", "tiny"}, {"prompt", ids}, {"max_tokens", 1}, {"prompt_logprobs", 2}}.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json plp = json::parse(r->body)["choices"][0]["prompt_logprobs"];
    ASSERT_EQ(plp.size(), ids.size());
    EXPECT_TRUE(plp[0].is_null());
    for (size_t i = 1; i < ids.size(); ++i) {
        const json& e = plp[i][std::to_string(ids[i])];
        EXPECT_EQ(e["logprob"].get<float>(), want[i - 1].logprob) << i;
        EXPECT_GE(e["rank"].get<int>(), 1) << i;
        EXPECT_EQ(e["rank"].get<int>() <= 2, plp[i].size() == 2u) << i;  // among the best two, or a third key
        int ranks = 0;
        for (const auto& [id, v] : plp[i].items()) ranks += v["rank"].get<int>() <= 2;
        EXPECT_EQ(ranks, 2) << i;
    }
    auto chat = post("/v1/chat/completions", kHello + R"("max_tokens": 1, "prompt_logprobs": 0})");
    ASSERT_TRUE(chat);
    ASSERT_EQ(chat->status, 200) << chat->body;
    const json cj = json::parse(chat->body);
    EXPECT_EQ(cj["prompt_logprobs"].size(), cj["usage"]["prompt_tokens"].get<size_t>());
    expect_error(
        post("/v1/completions",
             json{{"model", "tiny"}, {"prompt", ids}, {"prompt_logprobs", 1}, {"stream", true}}.dump()),
        400, "prompt_logprobs");
    expect_error(post("/v1/completions",
                      json{{"model", "tiny"}, {"prompt", ids}, {"echo", true}, {"stream", true}}.dump()),
                 400, "echo");
}

TEST_F(HttpTest, StreamingSendsChunksUsageAndDone) {
    std::string body;
    auto res = client().Post(
        "/v1/chat/completions",
        kHello +
            R"("max_tokens": 4, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}})",
        "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
    std::vector<json> chunks;
    size_t at = 0;
    bool done = false;
    while ((at = res->body.find("data: ", at)) != std::string::npos) {
        const size_t end = res->body.find("\n\n", at);
        const std::string data = res->body.substr(at + 6, end - at - 6);
        at = end;
        if (data == "[DONE]") {
            done = true;
            break;
        }
        chunks.push_back(json::parse(data));
    }
    EXPECT_TRUE(done);
    ASSERT_GE(chunks.size(), 2u);
    EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
    EXPECT_TRUE(chunks.back()["choices"].empty());
    EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 4);
    EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
}

TEST_F(HttpTest, BadInputGetsOpenAiErrors) {
    expect_error(post("/v1/chat/completions", "{not json"), 400, "");
    expect_error(post("/v1/chat/completions", kHello + R"("temperature": "hot"})"), 400, "temperature");
    expect_error(post("/v1/chat/completions", kHello + R"("max_tokens": 0})"), 400, "max_tokens");
    expect_error(post("/v1/chat/completions", kHello + R"("max_tokens": -3})"), 400, "max_tokens");
    expect_error(post("/v1/chat/completions", R"({"model": "tiny", "messages": []})"), 400, "messages");
    expect_error(
        post("/v1/chat/completions", R"({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})"),
        404, "model");
    expect_error(post("/v1/chat/completions", kHello + R"("logit_bias": {"3": 1}})"), 400, "logit_bias");
    // Ids outside the vocabulary (256) name their field, not the context limit.
    expect_error(post("/v1/completions", R"({"model": "tiny", "prompt": [1, 999]})"), 400, "prompt");
    expect_error(post("/v1/completions", R"({"model": "tiny", "prompt": [1], "stop_token_ids": [999]})"), 400,
                 "stop_token_ids");
    // Over the context limit (256): a 300-byte prompt, and a short one asking for too many tokens.
    expect_error(post("/v1/completions", R"({"model": "tiny", "prompt": ")" + std::string(300, 'a') + "\"}"),
                 400, "messages");
    expect_error(post("/v1/completions", R"({"model": "tiny", "prompt": "abc", "max_tokens": 254})"), 400,
                 "max_tokens");
    // Over the body limit (64 KiB).
    expect_error(
        post("/v1/completions", R"({"model": "tiny", "prompt": ")" + std::string(100000, 'a') + "\"}"), 413);
    EXPECT_TRUE(engine_idle());
    auto h = client().Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
}

// Requests that once took the server down: sizes that overflow the admission arithmetic, JSON nested
// hundreds of thousands of levels deep (inside the body limit), tool arguments that nest too deep.
TEST_F(HttpTest, HostileRequestsAreRefusedAndTheServerStaysUp) {
    const std::string huge = "9223372036854775807";
    expect_error(
        post("/v1/completions", R"({"model": "tiny", "prompt": [1, 2, 3], "max_tokens": )" + huge + "}"), 400,
        "max_tokens");
    expect_error(
        post("/v1/completions",
             R"({"model": "tiny", "prompt": [1, 2, 3], "stream": true, "max_tokens": )" + huge + "}"),
        400, "max_tokens");
    expect_error(post("/v1/chat/completions", kHello + R"("max_completion_tokens": )" + huge + "}"), 400,
                 "max_tokens");
    const int depth = 30000;  // 60 KB, under the 64 KiB body limit
    const std::string deep = std::string(depth, '[') + std::string(depth, ']');
    expect_error(post("/v1/completions", R"({"model": "tiny", "prompt": )" + deep + "}"), 400, "");
    expect_error(
        post("/v1/chat/completions", kHello +
                                         R"("tools": [{"type": "function", "function": {"name": "f", )"
                                         R"("parameters": )" +
                                         deep + "}}]}"),
        400, "");
    std::string args = std::string(2000, '[') + std::string(2000, ']');
    args = "{\\\"a\\\": " + args + "}";  // {\"a\": [[...]]} inside a JSON string
    expect_error(
        post("/v1/chat/completions",
             R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", )"
             R"("content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", )"
             R"("arguments": ")" +
                 args +
                 R"("}}]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}, )"
                 R"({"role": "user", "content": "go"}]})"),
        400);
    EXPECT_TRUE(engine_idle());
    auto h = client().Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
}

// Raw HTTP over one connection: sends `bytes`, reads until the server closes or `wait` passes.
std::string exchange(int fd, const std::string& bytes, double wait_s = 5) {
    EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), 0), ssize_t(bytes.size()));
    timeval tv{0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string got;
    char buf[65536];
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < wait_s) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n == 0) break;
        if (n > 0) got.append(buf, size_t(n));
    }
    return got;
}

size_t count(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

// 300 connections that trickle a request line one byte at a time, faster than the per-read timeout (a
// slowloris), must not keep /health from answering: the guard shuts down the oldest reading connections
// beyond a quarter of the workers and any that read longer than the read deadline.
TEST_F(HttpTest, SlowlorisDoesNotStarveHealth) {
    std::vector<int> fds;
    for (int i = 0; i < 300; ++i) fds.push_back(connect_raw());
    std::atomic<bool> stop{false};
    std::thread trickle([&] {
        const std::string line = "GET /health HTTP/1.1\r\nX-Slow: " + std::string(4000, 'a');
        for (size_t at = 0; !stop && at < line.size(); ++at) {
            for (int fd : fds) (void)::send(fd, &line[at], 1, MSG_NOSIGNAL);
            std::this_thread::sleep_for(std::chrono::milliseconds(300));  // under the 1 s read timeout
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // every worker had its chance to fill up
    const auto t0 = std::chrono::steady_clock::now();
    auto c = client();
    c.set_read_timeout(10, 0);
    auto h = c.Get("/health");
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stop = true;
    trickle.join();
    for (int fd : fds) ::close(fd);
    ASSERT_TRUE(h) << "/health did not answer under the slowloris";
    EXPECT_EQ(h->status, 200);
    EXPECT_LT(took, 1.0);
}

TEST_F(HttpTest, LongUriPipeliningAndUndecodablePaths) {
    {  // 100 KB URI: 414 with an OpenAI-style body, not a silent close
        const int fd = connect_raw();
        const std::string got =
            exchange(fd, "GET /v1/models/" + std::string(100000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 3);
        ::close(fd);
        EXPECT_EQ(got.rfind("HTTP/1.1 414", 0), 0u) << got.substr(0, 200);
        EXPECT_NE(got.find("the request URI is too long"), std::string::npos) << got.substr(0, 400);
    }
    {  // 20 pipelined requests in one write: 20 answers, in order
        std::string req;
        for (int i = 0; i < 20; ++i) req += "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        req += "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        const int fd = connect_raw();
        const std::string got = exchange(fd, req, 5);
        ::close(fd);
        EXPECT_EQ(count(got, "HTTP/1.1 200"), 21u) << got.substr(0, 300);
        EXPECT_EQ(count(got, R"({"status":"ok"})"), 20u);
        EXPECT_GT(got.rfind(R"("object":"list")"), got.rfind(R"({"status":"ok"})"));  // the last one last
    }
    auto r = client().Get("/v1/models/%FF%FE");  // not UTF-8 once decoded: an unknown model, not a 500
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << r->body;
    EXPECT_TRUE(json::parse(r->body, nullptr, false).is_object()) << r->body;
}

// /tokenize and /detokenize (vLLM's shapes): the prompt form, the chat form (the same ids a chat
// completion's usage counts), the round trip, and errors.
TEST_F(HttpTest, TokenizeAndDetokenize) {
    auto r = post("/tokenize", R"({"model": "tiny", "prompt": "hello world", "add_special_tokens": false})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json t = json::parse(r->body);
    EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), engine_->tokenizer()->encode("hello world", false));
    EXPECT_EQ(t["count"], t["tokens"].size());
    EXPECT_EQ(t["max_model_len"], 256);
    auto d = post("/detokenize", json{{"model", "tiny"}, {"tokens", t["tokens"]}}.dump());
    ASSERT_TRUE(d);
    EXPECT_EQ(json::parse(d->body)["prompt"], "hello world");
    const std::string msgs = R"("messages": [{"role": "user", "content": "hello"}])";
    auto c = post("/tokenize", R"({"model": "tiny", )" + msgs + "}");
    auto chat = post("/v1/chat/completions", R"({"model": "tiny", "max_tokens": 1, )" + msgs + "}");
    ASSERT_TRUE(c && chat);
    EXPECT_EQ(json::parse(c->body)["count"], json::parse(chat->body)["usage"]["prompt_tokens"]);
    expect_error(post("/tokenize", R"({"model": "other", "prompt": "x"})"), 404, "model");
    expect_error(post("/tokenize", R"({"prompt": 5})"), 400, "prompt");
    expect_error(post("/detokenize", R"({"tokens": [1, 99999999]})"), 400, "tokens");
    expect_error(post("/detokenize", R"({"tokens": "x"})"), 400, "tokens");
}

// Fields that change nothing about the output are accepted (frameworks always send them).
TEST_F(HttpTest, MetadataFieldsAreAccepted) {
    auto r = post("/v1/chat/completions",
                  kHello + R"("max_tokens": 2, "service_tier": "auto", )"
                           R"("prompt_cache_key": "k", "safety_identifier": "s", "user": "u", )"
                           R"("metadata": {"a": "b"}, "store": false})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(HttpTest, SlowClientIsDroppedAndServerStaysUp) {
    const int fd = connect_raw();
    const std::string part = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mo";
    ASSERT_EQ(::send(fd, part.data(), part.size(), 0), ssize_t(part.size()));
    // The read timeout is 1 s: the server gives up on the body and closes the connection.
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    const auto t0 = std::chrono::steady_clock::now();
    ssize_t n = 0;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(n, 0) << "the server did not close the stalled connection";
    EXPECT_LT(waited, 4.0);
    ::close(fd);
    auto h = client().Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
}

TEST_F(HttpTest, DisconnectMidStreamCancelsAndFreesState) {
    const uint64_t cancelled0 = engine_->stats().finished_cancelled;
    const int fd = connect_raw();
    const std::string body =
        R"({"model": "tiny", "prompt": "abc", "max_tokens": 200, "ignore_eos": true, "stream": true})";
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, req.data(), req.size(), 0), ssize_t(req.size()));
    char buf[4096];
    std::string got;
    while (got.find("\"text\"") == std::string::npos) {  // wait for the first token chunk
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        ASSERT_GT(n, 0);
        got.append(buf, size_t(n));
    }
    EXPECT_GT(engine_->stats().state_bytes_allocated, 0);
    linger lg{1, 0};  // abrupt: RST, not FIN
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    ::close(fd);
    EXPECT_TRUE(engine_idle()) << "state still held after the client vanished";
    EXPECT_EQ(engine_->stats().finished_cancelled, cancelled0 + 1);
    EXPECT_LT(engine_->stats().generation_tokens, 1000u);
}

TEST_F(HttpTest, DisconnectDuringNonStreamingRequestCancels) {
    const uint64_t cancelled0 = engine_->stats().finished_cancelled;
    const int fd = connect_raw();
    const std::string body = R"({"model": "tiny", "prompt": "abc", "max_tokens": 250, "ignore_eos": true})";
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, req.data(), req.size(), 0), ssize_t(req.size()));
    for (int i = 0; i < 500 && engine_->stats().n_running == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::close(fd);
    EXPECT_TRUE(engine_idle());
    EXPECT_EQ(engine_->stats().finished_cancelled, cancelled0 + 1);
}

TEST_F(HttpTest, FullQueueAnswers429) {
    // max_running 4 + max_waiting 2: eight long requests at once leave at least two refused.
    std::vector<std::thread> ts;
    std::atomic<int> ok{0}, refused{0};
    for (int i = 0; i < 8; ++i)
        ts.emplace_back([&] {
            auto r =
                client().Post("/v1/completions",
                              R"({"model": "tiny", "prompt": "abc", "max_tokens": 60, "ignore_eos": true})",
                              "application/json");
            if (r && r->status == 200) ++ok;
            if (r && r->status == 429) {
                auto j = json::parse(r->body);
                if (j["error"]["type"] == "rate_limit_error") ++refused;
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_GE(refused.load(), 2);
    EXPECT_EQ(ok.load() + refused.load(), 8);
    EXPECT_TRUE(engine_idle());
}

// A request past its deadline: 504 with an OpenAI error body, or, once streaming, an error event + [DONE].
TEST(HttpTimeout, TimedOutRequestsEndWithAnError) {
    EngineOptions eo = tiny_engine();
    eo.default_timeout = std::chrono::milliseconds(300);
    auto engine = Engine::create(eo);
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    ServerOptions so;
    so.port = 0;
    so.served_model_name = "tiny";
    HttpServer server(**engine, so);
    ASSERT_TRUE(server.bind().ok());
    std::thread t([&] { (void)server.run(); });
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(60, 0);
    const std::string body = R"({"model": "tiny", "prompt": "abc", "max_tokens": 5000, "ignore_eos": true)";
    auto r = c.Post("/v1/completions", body + "}", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 504) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "timeout");
    auto s = c.Post("/v1/completions", body + R"(, "stream": true})", "application/json");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->status, 200);
    const size_t err = s->body.find("data: {\"error\"");
    EXPECT_NE(err, std::string::npos) << s->body.substr(0, 300);
    EXPECT_NE(s->body.find("data: [DONE]", err == std::string::npos ? 0 : err), std::string::npos);
    EXPECT_EQ((*engine)->stats().finished_timeout, 2u);
    server.stop();
    t.join();
}

// Graceful shutdown (what `serve` does on SIGINT): the engine ends every request first, so an open stream
// gets an error event and [DONE], a queued request a 503, and only then does the listener stop.
TEST(HttpShutdown, OpenStreamsEndWithAnErrorEventAndDone) {
    EngineOptions eo = tiny_engine();
    eo.max_running = 1;
    auto engine = Engine::create(eo);
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    ServerOptions so;
    so.port = 0;
    so.served_model_name = "tiny";
    HttpServer server(**engine, so);
    ASSERT_TRUE(server.bind().ok());
    std::thread t([&] { (void)server.run(); });
    const std::string body =
        R"({"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 5000, "ignore_eos": true, )";
    std::string streamed;
    int queued_status = 0;
    std::thread stream([&] {
        httplib::Client c("127.0.0.1", server.port());
        c.set_read_timeout(60, 0);
        auto r = c.Post("/v1/completions", body + R"("stream": true})", "application/json");
        if (r) streamed = r->body;
    });
    std::thread queued([&] {
        // Only once the stream runs (a fixed sleep lost that race on a loaded machine: the stream was then
        // the queued one and got a 503 instead of its error event).
        for (int i = 0; i < 1000 && (*engine)->stats().n_running == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        httplib::Client c("127.0.0.1", server.port());
        c.set_read_timeout(60, 0);
        auto r = c.Post("/v1/completions", body + R"("stream": false})", "application/json");
        if (r) queued_status = r->status;
    });
    // Both counts: n_waiting alone is also 1 for the stream itself in the moment before the loop admits it,
    // and shutting down then left the second request unsent (it waited for a running stream that never came).
    auto both_in = [&] {
        const EngineStats st = (*engine)->stats();
        return st.n_running == 1 && st.n_waiting == 1;
    };
    for (int i = 0; i < 1000 && !both_in(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(both_in());
    (*engine)->shutdown();
    server.drain_and_stop(std::chrono::seconds(10));
    stream.join();
    queued.join();
    t.join();
    EXPECT_NE(streamed.find(R"("code":"cancelled")"), std::string::npos) << streamed.substr(0, 300);
    EXPECT_NE(streamed.find("data: [DONE]"), std::string::npos)
        << streamed.substr(streamed.size() > 300 ? streamed.size() - 300 : 0);
    EXPECT_EQ(queued_status, 503);
}

}  // namespace
}  // namespace di::server
