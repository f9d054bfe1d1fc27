// cxxfuncs.cpp: a C++ benchmark workload whose samples land on many functions with long
// mangled names, like a templated C++ server, so a profiler's symbolization and demangling
// costs show up in `report`.
//
// 512 instantiations of a class template (each a separate non-inlined function whose mangled
// name carries nested standard-library types) are called in a skewed pseudo-random order; about
// a fifth of the time goes to libstdc++ / libc (std::map of strings, std::sort, to_string).
//
//   c++ -O1 -g -fno-omit-frame-pointer -pthread -o cxxfuncs cxxfuncs.cpp
//   ./cxxfuncs [threads] [milliseconds]     (default: 1 thread, 1000 ms)
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bench {
namespace detail {

using Key = std::pair<std::vector<std::string>, std::map<int, std::string>>;
using Value = std::unordered_map<std::string, std::vector<std::pair<int, double>>>;

template <std::size_t N, class K, class V>
struct Kernel {
    __attribute__((noinline)) static std::uint64_t run(std::uint64_t x, std::uint64_t n)
    {
        for (std::uint64_t i = 0; i < n; i++) {
            x ^= x >> 29;
            x *= 0xbf58476d1ce4e5b9ULL + 2 * N;
            x += i ^ N;
        }
        return x;
    }
};

using Fn = std::uint64_t (*)(std::uint64_t, std::uint64_t);

template <std::size_t... I>
constexpr std::array<Fn, sizeof...(I)> make_table(std::index_sequence<I...>)
{
    return {&Kernel<I, Key, Value>::run...};
}

constexpr auto table = make_table(std::make_index_sequence<512>{});

}  // namespace detail

class Service {
public:
    explicit Service(std::uint64_t seed) : x_(seed) {}

    __attribute__((noinline)) void handle_batch()
    {
        for (int round = 0; round < 64; round++) {
            x_ = x_ * 6364136223846793005ULL + 1442695040888963407ULL;
            std::uint64_t u = (x_ >> 40) & 0xffff;  // squared: favours low indices
            std::size_t k = static_cast<std::size_t>((u * u) >> 23) % detail::table.size();
            x_ = detail::table[k](x_, 200 + (x_ >> 58) * 50);
        }
        library_work();
    }

    std::uint64_t value() const { return x_; }

private:
    __attribute__((noinline)) void library_work()
    {
        std::vector<std::uint32_t> v(256);
        for (auto &e : v) {
            x_ = x_ * 6364136223846793005ULL + 1442695040888963407ULL;
            e = static_cast<std::uint32_t>(x_ >> 32);
        }
        std::sort(v.begin(), v.end());
        for (int i = 0; i < 16; i++)
            index_[std::to_string(v[static_cast<std::size_t>(i) * 16] % 4096)] += i;
        if (index_.size() > 2048)
            index_.clear();
        x_ += index_.size();
    }

    std::uint64_t x_;
    std::map<std::string, int> index_;
};

}  // namespace bench

int main(int argc, char **argv)
{
    int threads = argc > 1 ? std::atoi(argv[1]) : 1;
    long ms = argc > 2 ? std::atol(argv[2]) : 1000;
    if (threads < 1 || threads > 64 || ms < 0) {
        std::fprintf(stderr, "usage: cxxfuncs [threads 1..64] [milliseconds]\n");
        return 2;
    }
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    std::vector<std::thread> pool;
    std::vector<std::uint64_t> out(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; t++)
        pool.emplace_back([t, end, &out] {
            bench::Service s(0x243f6a8885a308d3ULL + static_cast<std::uint64_t>(t));
            while (std::chrono::steady_clock::now() < end)
                s.handle_batch();
            out[static_cast<std::size_t>(t)] = s.value();
        });
    std::uint64_t sum = 0;
    for (int t = 0; t < threads; t++) {
        pool[static_cast<std::size_t>(t)].join();
        sum += out[static_cast<std::size_t>(t)];
    }
    std::printf("%llu\n", static_cast<unsigned long long>(sum & 0xff));
    return 0;
}
