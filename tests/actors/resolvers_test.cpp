// The cluster resolvers (resolvers.hpp): TF_CONFIG as Kubeflow and Vertex write it
// (verbatim golden cases), TensorFlow's SlurmClusterResolver test vectors, the MPI
// rendezvous in a directory, and every refusal naming what is wrong.
#include <actortrain/actors/net/resolvers.hpp>

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

using namespace actortrain;

namespace actortrain {
std::ostream& operator<<(std::ostream& os, const task_id& t) { return os << to_string(t); }
std::ostream& operator<<(std::ostream& os, resolver_kind k) { return os << to_string(k); }
}  // namespace actortrain

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const cluster_file_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> texts(const std::vector<task_address>& list) {
  std::vector<std::string> out;
  for (auto& a : list) out.push_back(a.text());
  return out;
}

using strings = std::vector<std::string>;

// TLS flags, so that addresses off loopback are allowed (the files are not read here).
tls_files some_tls() { return tls_files{"node.pem", "node.key", "ca.pem"}; }

resolver_inputs env(std::map<std::string, std::string> vars, strings host_names = {"vm"}) {
  resolver_inputs in;
  in.env = std::move(vars);
  in.host_names = std::move(host_names);
  in.identity = "boot/net:[1]";
  return in;
}

resolve_options options(resolver_kind kind, const std::string& jobs = "") {
  resolve_options o;
  o.kind = kind;
  o.jobs = jobs;
  o.tls_from_flags = some_tls();
  return o;
}

}  // namespace

// -- TF_CONFIG ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(kubeflow_tf_config_verbatim) {
  const std::string kubeflow =
    R"({"cluster": {"chief": ["myjob-chief-0.default.svc:2222"], "ps": ["myjob-ps-0.default.svc:2222"], "worker": ["myjob-worker-0.default.svc:2222", "myjob-worker-1.default.svc:2222"]}, "task": {"type": "worker", "index": 1}, "environment": "cloud"})";
  auto r = resolve_cluster(options(resolver_kind::automatic), env({{"TF_CONFIG", kubeflow}}));
  BOOST_TEST(r.kind == resolver_kind::tf_config);
  BOOST_TEST(texts(r.cluster.chief) == strings{"myjob-chief-0.default.svc:2222"});
  BOOST_TEST(texts(r.cluster.ps) == strings{"myjob-ps-0.default.svc:2222"});
  BOOST_TEST(texts(r.cluster.worker) == (strings{"myjob-worker-0.default.svc:2222", "myjob-worker-1.default.svc:2222"}));
  BOOST_TEST(*r.task == (task_id{task_type::worker, 1}));
  BOOST_TEST_REQUIRE(r.cluster.notes.size() == 1u);
  BOOST_TEST(contains(r.cluster.notes[0], "environment: ignored"));
  BOOST_TEST(describe_resolution(r, *r.task) ==
             "task worker:1 of chief 1, ps 1, worker 2 at myjob-worker-1.default.svc:2222 (from TF_CONFIG)");
}

BOOST_AUTO_TEST_CASE(vertex_tf_config_verbatim_master_is_the_chief) {
  const std::string vertex =
    R"({"cluster": {"master": ["10.0.0.2:2222"], "ps": ["10.0.0.3:2222"], "worker": ["10.0.0.4:2222"]}, "environment": "cloud", "task": {"type": "ps", "index": 0, "trial": "", "cloud": "x"}, "job": {"args": [], "job_name": "trainer"}, "rpc_layer": "grpc"})";
  auto r = resolve_cluster(options(resolver_kind::tf_config), env({{"TF_CONFIG", vertex}}));
  BOOST_TEST(texts(r.cluster.chief) == strings{"10.0.0.2:2222"});
  BOOST_TEST(texts(r.cluster.ps) == strings{"10.0.0.3:2222"});
  BOOST_TEST(texts(r.cluster.worker) == strings{"10.0.0.4:2222"});
  BOOST_TEST(*r.task == (task_id{task_type::ps, 0}));
  BOOST_TEST(r.cluster.coordinator_task() == (task_id{task_type::chief, 0}));
  // environment, job, rpc_layer, task.trial, task.cloud: each noted, none refused.
  BOOST_TEST(r.cluster.notes.size() == 5u);
  // A master task is the chief.
  const std::string as_master =
    R"({"cluster": {"master": ["10.0.0.2:2222"], "worker": ["10.0.0.4:2222"]}, "task": {"type": "master", "index": 0}})";
  auto m = resolve_cluster(options(resolver_kind::tf_config), env({{"TF_CONFIG", as_master}}));
  BOOST_TEST(*m.task == (task_id{task_type::chief, 0}));
}

BOOST_AUTO_TEST_CASE(tf_config_refuses_near_misses_of_its_own_keys_and_two_chiefs) {
  auto refuse = [](const std::string& text) {
    return error_of([&] { resolve_cluster(options(resolver_kind::tf_config), env({{"TF_CONFIG", text}})); });
  };
  BOOST_TEST(contains(refuse(R"({"cluster": {"worker": ["127.0.0.1:7000"]}, "consistancy": "sync"})"),
                      "TF_CONFIG: consistancy: unknown key 'consistancy': did you mean 'consistency'?"));
  BOOST_TEST(contains(refuse(R"({"cluster": {"worker": ["127.0.0.1:7000"]}, "task": {"type": "worker", "indx": 0}})"),
                      "did you mean 'index'?"));
  BOOST_TEST(contains(refuse(R"({"cluster": {"chief": ["127.0.0.1:1"], "master": ["127.0.0.1:2"], "worker": ["127.0.0.1:3"]}})"),
                      "cluster.master: 'master' is TensorFlow 1's name for the chief"));
  // A cluster file stays strict: another tool's key there is a mistake.
  BOOST_TEST(contains(error_of([] { parse_cluster_def(R"({"cluster": {"worker": ["127.0.0.1:7000"]}, "environment": "cloud"})", "c.json"); }),
                      "c.json: environment: unknown key"));
}

BOOST_AUTO_TEST_CASE(kubeflow_sparse_cluster_is_refused_saying_why_and_what_to_do) {
  // Not yet supported (see docs/engines.md): the form gives no worker count.
  const std::string sparse =
    R"({"sparseCluster": {"worker": {"1": "myjob-worker-1.default.svc:2222"}, "ps": ["myjob-ps-0.default.svc:2222"]}, "task": {"type": "worker", "index": 1}})";
  auto e = error_of([&] { resolve_cluster(options(resolver_kind::tf_config), env({{"TF_CONFIG", sparse}})); });
  BOOST_TEST(contains(e, "TF_CONFIG: sparseCluster: Kubeflow's dynamic-worker form"));
  BOOST_TEST(contains(e, "set enableDynamicWorker to false"));
  // The chief's, as the operator writes it: nobody at all.
  const std::string chief = R"({"sparseCluster": {"worker": {}, "ps": []}, "task": {"type": "chief", "index": 0}})";
  e = error_of([&] { resolve_cluster(options(resolver_kind::tf_config), env({{"TF_CONFIG", chief}})); });
  BOOST_TEST(contains(e, "the chief none"));
  // TensorFlow's sparse form inside "cluster" (TFConfigClusterResolver's own test).
  const std::string tf_sparse =
    R"({"cluster": {"ps": ["ps0:2222", "ps1:2222"], "worker": {"1": "worker1:2222"}}, "task": {"type": "worker", "index": 1}})";
  e = error_of([&] { resolve_cluster(options(resolver_kind::tf_config), env({{"TF_CONFIG", tf_sparse}})); });
  BOOST_TEST(contains(e, "TF_CONFIG: cluster.worker: an object of task indices is TensorFlow's sparse form"), e);
}

BOOST_AUTO_TEST_CASE(an_evaluator_outside_the_cluster_map) {
  // Kubeflow keeps the evaluator out of the cluster it writes.
  const std::string tf =
    R"({"cluster": {"chief": ["127.0.0.1:7000"], "worker": ["127.0.0.1:7001"]}, "task": {"type": "evaluator", "index": 0}})";
  auto r = resolve_cluster(options(resolver_kind::tf_config), env({{"TF_CONFIG", tf}}));
  BOOST_TEST(*r.task == (task_id{task_type::evaluator, 0}));
  BOOST_TEST(!r.cluster.listed(*r.task));
  BOOST_TEST(contains(describe_resolution(r, *r.task), "no address (outside the map)"));
  // Only evaluator 0, and only when no evaluator is listed.
  BOOST_TEST(contains(error_of([] {
                        parse_cluster_def(R"({"cluster": {"worker": ["127.0.0.1:7001"]}, "task": {"type": "evaluator", "index": 1}})",
                                          "TF_CONFIG", {}, cluster_dialect::tf_config);
                      }),
                      "task.index: 1 is out of range"));
}

// -- Slurm: TensorFlow's slurm_cluster_resolver_test.py vectors ----------------------------

BOOST_AUTO_TEST_CASE(slurm_hostlists_as_tensorflow_expands_them) {
  BOOST_TEST(expand_hostlist("n1") == strings{"n1"});
  BOOST_TEST(expand_hostlist("n[1,3]") == (strings{"n1", "n3"}));
  BOOST_TEST(expand_hostlist("n[1-3]") == (strings{"n1", "n2", "n3"}));
  BOOST_TEST(expand_hostlist("n[1-2],m5,o[3-4,6,7-9]") == (strings{"n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"}));
  BOOST_TEST(expand_hostlist("n[0001-0003],m5,o[009-011]") ==
             (strings{"n0001", "n0002", "n0003", "m5", "o009", "o010", "o011"}));
  // Beyond TensorFlow's: two bracket groups, a suffix.
  BOOST_TEST(expand_hostlist("r[1-2]-n[1-2]") == (strings{"r1-n1", "r1-n2", "r2-n1", "r2-n2"}));
  BOOST_TEST(expand_hostlist("n[1-2]-ib") == (strings{"n1-ib", "n2-ib"}));
  BOOST_TEST(expand_tasks_per_node("2") == std::vector<int>{2});
  BOOST_TEST(expand_tasks_per_node("2,1,3") == (std::vector<int>{2, 1, 3}));
  BOOST_TEST(expand_tasks_per_node("3(x2),2,1") == (std::vector<int>{3, 3, 2, 1}));
  BOOST_TEST(expand_tasks_per_node("3(x2),2,11(x4)") == (std::vector<int>{3, 3, 2, 11, 11, 11, 11}));
  BOOST_TEST(expand_tasks_per_node("13(x10)") == std::vector<int>(10, 13));
  // Refusals name the text.
  BOOST_TEST(contains(error_of([] { expand_hostlist("n[1-3"); }), "hostlist 'n[1-3': a '[' without its ']'"));
  BOOST_TEST(contains(error_of([] { expand_hostlist("n[3-1]"); }), "runs backwards"));
  BOOST_TEST(contains(error_of([] { expand_hostlist("n1,,n2"); }), "an empty host name"));
  BOOST_TEST(contains(error_of([] { expand_hostlist("n[1-99999999]"); }), "more than 65536 hosts"));
  BOOST_TEST(contains(error_of([] { expand_tasks_per_node("3(2)"); }), "'3(2)' is not N or N(xM)"));
  BOOST_TEST(contains(error_of([] { expand_tasks_per_node("0"); }), "N >= 1"));
}

BOOST_AUTO_TEST_CASE(slurm_simple_retrieval_from_env) {
  // testSimpleRetrievalFromEnv: no jobs given, every rank a worker.
  auto in = env({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "3"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                 {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"}},
                {"t02n13"});
  auto o = options(resolver_kind::automatic);
  o.port_base = 8888;
  auto r = resolve_cluster(o, in);
  BOOST_TEST(r.kind == resolver_kind::slurm);
  BOOST_TEST(texts(r.cluster.worker) == (strings{"t02n13:8888", "t02n41:8888", "t02n43:8888"}));
  BOOST_TEST(r.cluster.ps.empty());
  BOOST_TEST(*r.task == (task_id{task_type::worker, 0}));
}

BOOST_AUTO_TEST_CASE(slurm_simple_successful_retrieval_with_jobs) {
  // testSimpleSuccessfulRetrieval / testTaskPerNodeNotSetRetrieval: ps 1, worker 2.
  auto in = env({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "3"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                 {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"}},
                {"t02n13"});
  auto r = resolve_cluster(options(resolver_kind::slurm, "ps=1,worker=2"), in);
  BOOST_TEST(texts(r.cluster.ps) == strings{"t02n13:8888"});
  BOOST_TEST(texts(r.cluster.worker) == (strings{"t02n41:8888", "t02n43:8888"}));
  BOOST_TEST(*r.task == (task_id{task_type::ps, 0}));
  // testSimpleMasterRetrieval: worker 1 is at t02n43:8888.
  BOOST_TEST(r.cluster.address(task_id{task_type::worker, 1}).text() == "t02n43:8888");
}

BOOST_AUTO_TEST_CASE(slurm_multi_task_per_node_retrieval) {
  // testMultiTaskPerNodeRetrieval: rank 1 of ps 1, worker 4 on 2(x2),1.
  auto in = env({{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "5"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                 {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"}},
                {"t02n13"});
  auto r = resolve_cluster(options(resolver_kind::slurm, "ps=1,worker=4"), in);
  BOOST_TEST(texts(r.cluster.ps) == strings{"t02n13:8888"});
  BOOST_TEST(texts(r.cluster.worker) == (strings{"t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"}));
  BOOST_TEST(*r.task == (task_id{task_type::worker, 0}));
  BOOST_TEST(r.source == "Slurm (rank 1 of 5 on t02n13)");
}

BOOST_AUTO_TEST_CASE(slurm_roles_in_name_order_and_hosts_sorted) {
  // chief < evaluator < ps < worker; hosts sorted whatever the nodelist's order.
  auto l = slurm_layout({{"b", 2}, {"a", 3}}, parse_job_counts("worker=2,ps=2,chief=1"), 7000);
  BOOST_TEST(texts(l.cluster[task_type::chief]) == strings{"a:7000"});
  BOOST_TEST(texts(l.cluster[task_type::ps]) == (strings{"a:7001", "a:7002"}));
  BOOST_TEST(texts(l.cluster[task_type::worker]) == (strings{"b:7000", "b:7001"}));
  BOOST_TEST(l.task[3] == (task_id{task_type::worker, 0}));
}

BOOST_AUTO_TEST_CASE(slurm_refuses_a_rank_laid_out_on_another_host) {
  // Better than TensorFlow, which builds the wrong cluster without a word.
  auto in = env({{"SLURM_PROCID", "2"}, {"SLURM_STEP_NUM_TASKS", "3"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                 {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"}},
                {"t02n41"});
  auto e = error_of([&] { resolve_cluster(options(resolver_kind::slurm), in); });
  BOOST_TEST(contains(e, "Slurm: rank 2 is laid out on host t02n43"));
  BOOST_TEST(contains(e, "but runs on t02n41"));
}

BOOST_AUTO_TEST_CASE(slurm_on_this_host_alone_is_loopback_and_needs_no_tls) {
  auto in = env({{"SLURM_PROCID", "4"}, {"SLURM_STEP_NUM_TASKS", "5"}, {"SLURM_STEP_TASKS_PER_NODE", "5"},
                 {"SLURM_STEP_NODELIST", "vm"}},
                {"vm"});
  auto o = options(resolver_kind::slurm, "chief=1,ps=2,worker=2");
  o.tls_from_flags = {};
  auto r = resolve_cluster(o, in);
  BOOST_TEST(texts(r.cluster.chief) == strings{"127.0.0.1:8888"});
  BOOST_TEST(texts(r.cluster.worker) == (strings{"127.0.0.1:8891", "127.0.0.1:8892"}));
  BOOST_TEST(*r.task == (task_id{task_type::worker, 1}));
  BOOST_TEST(describe_resolution(r, *r.task) ==
             "task worker:1 of chief 1, ps 2, worker 2 at 127.0.0.1:8892 (from Slurm (rank 4 of 5 on vm))");
}

BOOST_AUTO_TEST_CASE(slurm_refusals_name_the_variable) {
  auto refuse = [](std::map<std::string, std::string> vars, const std::string& jobs = "") {
    return error_of([&] { resolve_cluster(options(resolver_kind::slurm, jobs), env(std::move(vars), {"a"})); });
  };
  BOOST_TEST(contains(refuse({{"SLURM_PROCID", "0"}}), "Slurm: SLURM_STEP_NUM_TASKS is not set: run the task with srun"));
  std::map<std::string, std::string> ok{{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"},
                                        {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_STEP_NODELIST", "a"}};
  auto with = [&](const std::string& k, const std::string& v) {
    auto m = ok;
    m[k] = v;
    return m;
  };
  BOOST_TEST(contains(refuse(with("SLURM_PROCID", "x")), "SLURM_PROCID='x' is not a whole number"));
  BOOST_TEST(contains(refuse(with("SLURM_PROCID", "2")), "SLURM_PROCID 2 is out of range: the step has 2 task(s)"));
  BOOST_TEST(contains(refuse(with("SLURM_STEP_TASKS_PER_NODE", "3")), "adds up to 3 task(s), SLURM_STEP_NUM_TASKS is 2"));
  BOOST_TEST(contains(refuse(with("SLURM_STEP_NODELIST", "a,b")), "names 2 host(s) but SLURM_STEP_TASKS_PER_NODE gives 1"));
  BOOST_TEST(contains(refuse(ok, "ps=1,worker=2"), "--jobs ps=1,worker=2 is 3 task(s), but the Slurm step has 2"));
  BOOST_TEST(contains(refuse(ok, "ps=1"), "--jobs 'ps=1': a cluster needs at least one worker"));
  BOOST_TEST(contains(refuse(ok, "chief=2,worker=1"), "at most one chief, got 2"));
  BOOST_TEST(contains(refuse(ok, "boss=1,worker=1"), "unknown role 'boss'"));
  BOOST_TEST(contains(refuse(ok, "worker=1,worker=1"), "worker is given twice"));
}

// -- MPI ---------------------------------------------------------------------------------

namespace {

struct scratch_dir {
  std::filesystem::path path;
  scratch_dir() {
    path = std::filesystem::temp_directory_path() /
           ("actortrain-rendezvous-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
    std::filesystem::create_directories(path);
  }
  ~scratch_dir() { std::filesystem::remove_all(path); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(mpi_rendezvous_between_ranks_on_two_hosts) {
  scratch_dir dir;
  // Four ranks on two hosts (identities), each resolving on its own thread as four
  // processes would.
  std::vector<resolution> got(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      auto in = env({{"OMPI_COMM_WORLD_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_SIZE", "4"},
                     {"PMIX_NAMESPACE", "prterun-vm-123@1"}});
      in.identity = r % 2 == 0 ? "boot/net:[1]" : "boot/net:[2]";
      in.default_address = r % 2 == 0 ? "10.9.0.1" : "10.9.0.2";
      auto o = options(resolver_kind::mpi, "ps=1,worker=3");
      o.rendezvous_dir = dir.path.string();
      o.port_base = 9000;
      o.rendezvous_timeout = std::chrono::seconds(20);
      errors[static_cast<size_t>(r)] = error_of([&] { got[static_cast<size_t>(r)] = resolve_cluster(o, in); });
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 4; ++r) BOOST_TEST_REQUIRE(errors[static_cast<size_t>(r)] == "");
  for (auto& g : got) {
    // Every rank sees the same cluster: ranks on their own hosts, ports in rank order.
    BOOST_TEST(texts(g.cluster.ps) == strings{"10.9.0.1:9000"});
    BOOST_TEST(texts(g.cluster.worker) == (strings{"10.9.0.2:9000", "10.9.0.1:9001", "10.9.0.2:9001"}));
  }
  BOOST_TEST(*got[0].task == (task_id{task_type::ps, 0}));
  BOOST_TEST(*got[3].task == (task_id{task_type::worker, 2}));
  BOOST_TEST(got[2].source == "MPI (OMPI_COMM_WORLD_RANK 2 of 4)");
  // The launch's own subdirectory holds the addresses.
  BOOST_TEST(std::filesystem::exists(dir.path / "prterun-vm-123_1" / "rank-3"));
}

BOOST_AUTO_TEST_CASE(mpi_ranks_of_one_host_use_loopback) {
  std::vector<rank_host> hosts(3, rank_host{"192.0.2.2", "boot/net:[1]"});
  auto l = rank_layout_of(hosts, parse_job_counts("chief=1,worker=2"), 8000);
  BOOST_TEST(texts(l.cluster[task_type::chief]) == strings{"127.0.0.1:8000"});
  BOOST_TEST(texts(l.cluster[task_type::worker]) == (strings{"127.0.0.1:8001", "127.0.0.1:8002"}));
}

BOOST_AUTO_TEST_CASE(mpi_refusals_and_a_rank_that_never_comes) {
  scratch_dir dir;
  auto o = options(resolver_kind::mpi);
  BOOST_TEST(contains(error_of([&] { resolve_cluster(o, env({})); }),
                      "MPI: none of OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK is set"));
  BOOST_TEST(contains(error_of([&] { resolve_cluster(o, env({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}})); }),
                      "MPI: give --rendezvous DIR"));
  BOOST_TEST(contains(error_of([&] { resolve_cluster(o, env({{"PMI_RANK", "3"}, {"PMI_SIZE", "2"}})); }),
                      "MPI: PMI_RANK 3 is out of range: PMI_SIZE is 2"));
  o.rendezvous_dir = dir.path.string();
  o.rendezvous_timeout = std::chrono::milliseconds(300);
  BOOST_TEST(contains(error_of([&] { resolve_cluster(o, env({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}})); }),
                      "MPI: rank(s) 1, 2 did not publish an address in"));
  // A file of another launch with another size in the same directory.
  {
    std::ofstream f{dir.path / "rank-1"};
    f << R"({"rank": 1, "size": 5, "host": "x", "identity": "y"})";
  }
  BOOST_TEST(contains(error_of([&] { resolve_cluster(o, env({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}})); }),
                      "is of a run with 5 ranks, this one has 2: give a fresh --rendezvous directory"));
}

BOOST_AUTO_TEST_CASE(automatic_order_and_a_clear_error_without_any_source) {
  BOOST_TEST(contains(error_of([] { resolve_cluster(options(resolver_kind::automatic), env({})); }),
                      "no cluster: give --cluster FILE, set TF_CONFIG, or start the tasks with srun or mpirun"));
  BOOST_TEST(parse_resolver("slurm") == resolver_kind::slurm);
  BOOST_TEST(contains(error_of([] { parse_resolver("k8s"); }), "--resolver 'k8s': unknown"));
  // TF_CONFIG wins over a Slurm step it runs in.
  auto in = env({{"TF_CONFIG", R"({"cluster": {"worker": ["127.0.0.1:7000"]}, "task": {"type": "worker", "index": 0}})"},
                 {"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}});
  BOOST_TEST(resolve_cluster(options(resolver_kind::automatic), in).kind == resolver_kind::tf_config);
}

BOOST_AUTO_TEST_CASE(settings_beside_a_resolved_cluster) {
  scratch_dir dir;
  auto settings = (dir.path / "settings.json").string();
  {
    std::ofstream f{settings};
    f << R"({"consistency": "sync", "timeouts": {"connect_ms": 30000}, "secret": "job.secret"})";
  }
  auto in = env({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "2"},
                 {"SLURM_STEP_NODELIST", "vm"}});
  auto o = options(resolver_kind::slurm);
  o.tls_from_flags = {};
  o.cluster_file = settings;
  auto r = resolve_cluster(o, in);
  BOOST_TEST(r.cluster.connect_timeout.count() == 30000);
  BOOST_TEST(r.cluster.effective_consistency().to_string() == "sync");
  BOOST_TEST(r.cluster.secret_file == (dir.path / "job.secret").string());
  {
    std::ofstream f{settings};
    f << R"({"cluster": {"worker": ["127.0.0.1:1"]}})";
  }
  BOOST_TEST(contains(error_of([&] { resolve_cluster(o, in); }),
                      "cluster: the cluster and the task come from Slurm (rank 0 of 2 on vm)"));
}
