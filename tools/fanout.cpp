// fanout.cpp: `convt3d tune --devices`: worker processes per GPU, the parent's hand-out loop.
#include "tools/fanout.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>
#include <sstream>

#include "base/status.h"

namespace convt3d::cli {

// ---- Parsing ----------------------------------------------------------------------------------

StatusOr<std::vector<int>> ParseDevices(const std::string& text, int gpu_count) {
  if (text == "all") {
    if (gpu_count < 0)
      return InvalidArgument(
          "--devices=all: no GPU to count here; name the devices, e.g. --devices 0,1");
    if (gpu_count == 0) return InvalidArgument("--devices=all: this machine has no GPU");
    std::vector<int> all(gpu_count);
    for (int i = 0; i < gpu_count; ++i) all[i] = i;
    return all;
  }
  std::vector<int> out;
  std::set<int> seen;
  std::stringstream ss(text);
  std::string token;
  bool any = false;
  while (std::getline(ss, token, ',')) {
    any = true;
    int64_t v = 0;
    std::string err = ParseFlagInt("--devices", token, 0, 1023, &v);
    if (!err.empty())
      return InvalidArgument(StrCat(err, " (expected all or a list of GPU ordinals, e.g. 0,1)"));
    if (gpu_count >= 0 && v >= gpu_count)
      return InvalidArgument(StrCat("--devices: there is no GPU ", v, "; this machine has ",
                                    gpu_count, " (0-", gpu_count - 1, ")"));
    if (!seen.insert(static_cast<int>(v)).second)
      return InvalidArgument(StrCat("--devices: GPU ", v, " is listed twice"));
    out.push_back(static_cast<int>(v));
  }
  if (!any || text.empty() || text.back() == ',')
    return InvalidArgument(StrCat("--devices=", Printable(text),
                                  ": expected all or a list of GPU ordinals, e.g. 0,1"));
  return out;
}

// ---- Dispatcher -------------------------------------------------------------------------------

Dispatcher::Dispatcher(int pairs, int workers, int max_restarts, std::vector<int> order)
    : pairs_(pairs),
      max_restarts_(max_restarts),
      order_(std::move(order)),
      in_flight_(workers),
      restarts_(workers, 0) {
  if (static_cast<int>(order_.size()) != pairs_) {  // none given (or not a permutation's size)
    order_.resize(pairs_);
    for (int i = 0; i < pairs_; ++i) order_[i] = i;
  }
}

std::optional<int> Dispatcher::Next(int worker) {
  if (next_ >= pairs_) return std::nullopt;
  in_flight_[worker] = order_[next_];
  return order_[next_++];
}

void Dispatcher::Reported(int worker) { in_flight_[worker].reset(); }

std::optional<int> Dispatcher::Exited(int worker, bool served, bool* restart) {
  std::optional<int> lost = in_flight_[worker];
  in_flight_[worker].reset();
  *restart = served && next_ < pairs_ && restarts_[worker] < max_restarts_;
  if (*restart) ++restarts_[worker];
  return lost;
}

std::vector<int> Dispatcher::Unstarted() const {
  std::vector<int> out;
  for (int i = next_; i < pairs_; ++i) out.push_back(order_[i]);
  return out;
}

std::vector<int> LongestFirst(const std::vector<double>& cost) {
  std::vector<int> order(cost.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });
  return order;
}

// ---- Command line -----------------------------------------------------------------------------

namespace {
std::vector<std::string>& MutableCommandLine() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace

void SetCommandLine(int argc, char** argv) { MutableCommandLine().assign(argv, argv + argc); }
const std::vector<std::string>& CommandLine() { return MutableCommandLine(); }

std::vector<std::string> WithoutOptions(const std::vector<std::string>& args,
                                        const std::vector<std::string>& drop) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    bool dropped = false;
    for (const std::string& d : drop) {
      if (args[i] == d) {
        ++i;  // and its value
        dropped = true;
        break;
      }
      if (args[i].rfind(d + "=", 0) == 0) {
        dropped = true;
        break;
      }
    }
    if (!dropped) out.push_back(args[i]);
  }
  return out;
}

// ---- Worker -----------------------------------------------------------------------------------

namespace {

bool WriteAll(int fd, const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    const ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Test hooks (tests/test_fanout.cpp): CONVT3D_TEST_WORKER_EXIT=<device>:<file> makes the worker
// of that device exit with status 3 on receiving a pair, once: it creates <file> first, and a
// worker that finds the file goes on normally. <device>:start makes it fail to start instead.
std::string TestHook(int device) {
  const char* hook = std::getenv("CONVT3D_TEST_WORKER_EXIT");
  if (hook == nullptr) return "";
  const std::string h = hook;
  const size_t colon = h.find(':');
  if (colon == std::string::npos || h.substr(0, colon) != std::to_string(device)) return "";
  return h.substr(colon + 1);
}

bool TestHookExits(int device) {
  const std::string file = TestHook(device);
  if (file.empty() || file == "start") return false;
  const int fd = open(file.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return false;
  close(fd);
  return true;
}

}  // namespace

int ServeWorker(int device, int pairs, const WorkerHooks& hooks) {
  if (TestHook(device) == "start") {
    Error("test hook: this worker does not start");
    return 4;
  }
  // The protocol gets standard output to itself; stray prints go to stderr.
  std::cout.flush();
  const int proto = dup(STDOUT_FILENO);
  if (proto < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    Error(StrCat("worker for device ", device, ": cannot set up its output"));
    return kExitFailure;
  }
  std::cout.rdbuf(std::cerr.rdbuf());
  auto send = [proto](const OJson& j) { return WriteAll(proto, j.dump() + "\n"); };
  if (!send(OJson{{"pairs", pairs}})) return kExitFailure;
  const Status started = hooks.start();
  if (!started.ok()) {
    send(OJson{{"error", started.ToString()}});
    return kExitFailure;
  }
  if (!send(OJson{{"ready", true}})) return kExitFailure;
  for (std::string line; std::getline(std::cin, line);) {
    int64_t pair = -1;
    if (!ParseFlagInt("pair", line, 0, pairs - 1, &pair).empty()) {
      Error(StrCat("worker for device ", device, ": bad request '", Printable(line), "'"));
      return kExitFailure;
    }
    if (TestHookExits(device)) _exit(3);
    PairOutcome o = hooks.run(static_cast<int>(pair));
    OJson reply{{"pair", pair}, {"ok", o.ok}, {"row", o.row}, {"compiles", o.compiles}};
    reply["result"] = std::move(o.result);
    std::cerr.flush();  // its progress lines come before the result's line in the merged output
    if (!send(reply)) return kExitFailure;
  }
  return kExitOk;
}

// ---- Parent -----------------------------------------------------------------------------------

namespace {

struct Worker {
  int device = 0;
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;  // our ends: its stdin, stdout, stderr
  std::string out_buf, err_buf;
  bool listed = false;             // sent its list size: its stderr is forwarded from here on
  std::vector<std::string> early;  // stderr before that (the parent said it all already)
  bool served = false;             // ready: its engine started
  std::string error;               // the reason it gave for not starting
  bool running() const { return pid > 0; }
};

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// Starts `self argv... --worker-device N` with pipes on its standard streams.
Status Spawn(const std::vector<std::string>& argv, Worker* w) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0) return Internal(StrCat("pipe: ", std::strerror(errno)));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]);
    return Internal(StrCat("pipe: ", std::strerror(errno)));
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    return Internal(StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<std::string> args = argv;
  args.insert(args.begin(), CommandLine().empty() ? "convt3d" : CommandLine()[0]);
  args.push_back("--worker-device");
  args.push_back(std::to_string(w->device));
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
    return Internal(StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {  // the child: async-signal-safe calls only until exec
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execv("/proc/self/exe", cargs.data());
    _exit(127);
  }
  close(in[0]), close(out[1]), close(err[1]);
  w->pid = pid;
  w->in = in[1], w->out = out[0], w->err = err[0];
  w->out_buf.clear(), w->err_buf.clear();
  w->listed = w->served = false;
  w->early.clear();
  w->error.clear();
  return Status();
}

std::string ExitText(int status) {
  if (WIFEXITED(status)) return StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return StrCat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                  ")");
  return "stopped";
}

// Splits complete lines off `buf`.
std::vector<std::string> Lines(std::string* buf) {
  std::vector<std::string> lines;
  for (size_t nl; (nl = buf->find('\n')) != std::string::npos;) {
    lines.push_back(buf->substr(0, nl));
    buf->erase(0, nl + 1);
  }
  return lines;
}

PairOutcome Failed(const std::string& name, int device, const std::string& why) {
  PairOutcome o;
  o.device = device;
  o.result = OJson{{"name", name}, {"status", "error"}, {"error", why}};
  o.row = {name, "(failed)"};
  return o;
}

}  // namespace

std::vector<PairOutcome> RunFanout(const FanoutSpec& spec,
                                   std::vector<std::string>* worker_errors) {
  const int n = static_cast<int>(spec.names.size());
  const int nw = static_cast<int>(spec.devices.size());
  std::vector<PairOutcome> outcomes(n);
  std::vector<bool> resolved(n, false);
  Dispatcher dispatcher(n, nw, spec.max_restarts, spec.order);
  std::vector<Worker> workers(nw);
  // A worker gone while we write to its stdin must not kill us.
  struct sigaction ignore = {}, old_pipe = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old_pipe);

  auto label = [&](const Worker& w) { return StrCat(spec.label, w.device); };
  auto resolve = [&](int pair, PairOutcome o) {
    outcomes[pair] = std::move(o);
    resolved[pair] = true;
  };
  auto start = [&](Worker& w) {
    Status s = Spawn(spec.worker_argv, &w);
    if (!s.ok()) Error(StrCat(label(w), ": cannot start a worker: ", s.message()));
    return s.ok();
  };
  // Gives an idle worker its next pair, or closes its stdin (it then exits).
  auto feed = [&](Worker& w, int index) {
    if (w.in < 0) return;  // refused (its list differs): it takes nothing
    std::optional<int> pair = dispatcher.Next(index);
    if (pair && WriteAll(w.in, StrCat(*pair, "\n"))) return;
    CloseFd(&w.in);  // a failed write: it is gone, and its exit reports the pair
  };
  for (int i = 0; i < nw; ++i) {
    workers[i].device = spec.devices[i];
    start(workers[i]);
  }
  auto handle_message = [&](Worker& w, int index, const std::string& line) {
    OJson j = OJson::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      Error(StrCat(label(w), ": unreadable worker message '", OneLine(Printable(line), 120), "'"));
      return;
    }
    if (j.contains("pairs")) {
      w.listed = true;
      if (j["pairs"] != n) {
        Error(StrCat(label(w), ": the worker built ", j["pairs"].dump(), " pairs, not ", n));
        CloseFd(&w.in);
      }
    } else if (j.contains("error")) {
      w.error = j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
    } else if (j.contains("ready")) {
      w.served = true;
      feed(w, index);
    } else if (j.contains("pair") && j["pair"].is_number_integer()) {
      const int pair = j["pair"].get<int>();
      if (pair < 0 || pair >= n || dispatcher.InFlight(index) != pair) {
        Error(StrCat(label(w), ": reported pair ", pair, ", which it was not given"));
        return;
      }
      PairOutcome o;
      o.ok = j.value("ok", false);
      o.compiles = j.value("compiles", 0);
      o.device = w.device;
      if (j["row"].is_array())
        for (const auto& cell : j["row"])
          o.row.push_back(cell.is_string() ? cell.get<std::string>() : cell.dump());
      o.result = j["result"];
      o.result["device"] = w.device;
      resolve(pair, std::move(o));
      dispatcher.Reported(index);
      feed(w, index);
    }
  };

  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // worker index, is stdout
    for (int i = 0; i < nw; ++i) {
      if (workers[i].out >= 0) fds.push_back({workers[i].out, POLLIN, 0}), who.push_back({i, true});
      if (workers[i].err >= 0)
        fds.push_back({workers[i].err, POLLIN, 0}), who.push_back({i, false});
    }
    if (fds.empty()) break;
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      Error(StrCat("poll: ", std::strerror(errno)));
      break;
    }
    for (size_t f = 0; f < fds.size(); ++f) {
      if (!(fds[f].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const int i = who[f].first;
      Worker& w = workers[i];
      int* fd = who[f].second ? &w.out : &w.err;
      std::string* buf = who[f].second ? &w.out_buf : &w.err_buf;
      char chunk[8192];
      const ssize_t got = read(*fd, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got > 0) buf->append(chunk, static_cast<size_t>(got));
      if (got <= 0) {
        if (!buf->empty()) buf->push_back('\n');  // a last line without its newline
        CloseFd(fd);
      }
      for (const std::string& line : Lines(buf)) {
        if (who[f].second) {
          handle_message(w, i, line);
        } else if (w.listed) {
          std::cerr << label(w) << ": " << line << "\n";
        } else if (w.early.size() < 20) {
          w.early.push_back(line);
        }
      }
      std::cerr.flush();
      if (w.out >= 0 || w.err >= 0) continue;
      // Both streams closed: the worker is done or dead.
      int status = 0;
      while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
      w.pid = -1;
      CloseFd(&w.in);
      const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!w.served) {
        if (!w.listed)  // it did not get as far as its list: what it said is the reason
          for (const std::string& line : w.early) std::cerr << label(w) << ": " << line << "\n";
        const std::string why = StrCat(label(w), ": the worker could not start (",
                                       w.error.empty() ? ExitText(status) : w.error, ")");
        Error(why);
        if (worker_errors) worker_errors->push_back(why);
      }
      bool restart = false;
      const std::optional<int> lost = dispatcher.Exited(i, w.served, &restart);
      if (lost) {
        const std::string why = StrCat("the worker process for ", label(w), " ", ExitText(status),
                                       " while on this pair");
        Error(StrCat(spec.names[*lost], ": ", why));
        resolve(*lost, Failed(spec.names[*lost], w.device, why));
      } else if (!clean && w.served) {
        const std::string why = StrCat(label(w), ": the worker ", ExitText(status));
        Error(why);
        if (worker_errors) worker_errors->push_back(why);
      }
      if (restart) {
        Warn(StrCat(label(w), ": starting another worker for the remaining pairs"));
        start(w);
      }
    }
  }
  for (int pair : dispatcher.Unstarted())
    if (!resolved[pair])
      resolve(pair, Failed(spec.names[pair], -1, "not run: no worker was left to take it"));
  sigaction(SIGPIPE, &old_pipe, nullptr);
  return outcomes;
}

}  // namespace convt3d::cli
