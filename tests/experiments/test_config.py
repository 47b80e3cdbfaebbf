"""The experiment-config checks and the --set / --only machinery of experiments.config."""

import copy

import pytest

import fedsparse as fs
from fedsparse import ConfigError
from fedsparse.experiments.config import (
    build_algorithm,
    build_channel,
    build_data,
    check_config,
    resolve_runs,
)
from fedsparse.experiments.run_selection import (
    apply_overrides,
    pick_run,
    run_choices,
    select_runs,
    set_path,
)

CONFIG = {
    "title": "t",
    "defaults": {"rounds": 5, "problem": {"kind": "least_squares"},
                 "data": {"kind": "shifted_gaussian", "num_clients": 4, "dim": 10,
                          "sparsity": 2, "samples_per_client": 10},
                 "algorithm": {"sparsity": 2, "step_size": 0.1}},
    "runs": [
        {"label": "A", "panel": "P1", "algorithm": {"kind": "fed_ht", "step_size": 0.5}},
        {"label": "B", "panel": "P1", "algorithm": {"kind": "fed_iter_ht"}},
        {"label": "A", "panel": "P2", "algorithm": {"kind": "fed_ht"}, "rounds": 7},
    ],
    "compare": {"reference": "A", "at_rounds": [2]},
}


def test_a_packaged_style_config_passes():
    runs = resolve_runs(CONFIG)
    assert [r["slug"] for r in runs] == ["p1-a", "p1-b", "p2-a"]
    assert [r["rounds"] for r in runs] == [5, 5, 7]
    assert check_config(CONFIG) is CONFIG


@pytest.mark.parametrize("mutate,message", [
    (lambda c: c.update(defualts={}), "did you mean 'defaults'"),
    (lambda c: c.update(plot={"y": ["objective"], "logx": True}), "did you mean 'logy'"),
    (lambda c: c.update(plot={"y": ["objectve"]}), "did you mean 'objective'"),
    (lambda c: c.update(plot={"logy": "yes"}), "plot.logy"),
    (lambda c: c["compare"].update(metrc="objective"), "did you mean 'metric'"),
    (lambda c: c["compare"].update(reference="a"), "compare.reference"),
    (lambda c: c["compare"].update(at_rounds=[]), "compare.at_rounds"),
    (lambda c: c.update(flower={"round_timeout": 1}), "[defaults.flower]"),
    (lambda c: c.update(runs=[]), "at least one [[runs]]"),
    (lambda c: c.update(runs={"label": "x"}), "array of tables"),
    (lambda c: c.update(title=3), "title=3"),
    (lambda c: c["runs"][0].update(seed=-1), "seed=-1"),
    (lambda c: c["runs"][0].update(checkpoint_every=0), "checkpoint_every=0"),
    (lambda c: c["runs"][0].update(panel=None), "panel=None"),
    (lambda c: c["runs"][0].update(label=" "), "runs[0].label=' ' is invalid: must not be "
                                                "empty"),
    (lambda c: c["runs"][0].update(chanel={}), "did you mean 'channel'"),
    (lambda c: c["runs"][2].update(panel="P1"), "two runs share panel and label ('P1', 'A')"),
    # labels that differ only in what a folder name drops
    (lambda c: c["runs"][1].update(label="A!"), "give the folder name 'p1-a', as those of "
     "another run ('P1', 'A') do"),
    (lambda c: c["defaults"].pop("problem"), "needs a [problem] table"),
])
def test_config_mistakes_are_named(mutate, message):
    config = copy.deepcopy(CONFIG)
    mutate(config)
    with pytest.raises(ConfigError) as exc:
        resolve_runs(config)
    assert message in str(exc.value)


def test_overrides_apply_to_every_run_even_where_the_run_sets_the_field():
    config = apply_overrides(CONFIG, [("algorithm.step_size", 0.01), ("rounds", 3)])
    runs = resolve_runs(config)
    assert [r["algorithm"]["step_size"] for r in runs] == [0.01] * 3
    assert [r["rounds"] for r in runs] == [3] * 3
    assert CONFIG["runs"][0]["algorithm"]["step_size"] == 0.5  # the input is not changed


def test_label_prefixed_override_changes_the_runs_of_that_label_only():
    runs = resolve_runs(apply_overrides(CONFIG, [("B:algorithm.local_steps", 4)]))
    assert [r["algorithm"].get("local_steps") for r in runs] == [None, 4, None]
    with pytest.raises(ConfigError, match="did you mean 'B'"):
        apply_overrides(CONFIG, [("b:algorithm.local_steps", 4)])


def test_overrides_keep_tables_tables_and_merge_inline_tables():
    with pytest.raises(ConfigError, match=r"\[algorithm\] is a table"):
        apply_overrides(CONFIG, [("algorithm", 3)])
    with pytest.raises(ConfigError, match="algorithm.kind is 'fed_ht', not a table"):
        apply_overrides(CONFIG, [("algorithm.kind.x", 1)])
    with pytest.raises(ConfigError, match="did you mean 'rounds'"):
        apply_overrides(CONFIG, [("round", 1)])
    runs = resolve_runs(apply_overrides(CONFIG, [("data", {"dim": 12})]))
    assert runs[0]["data"]["dim"] == 12 and runs[0]["data"]["kind"] == "shifted_gaussian"
    # a table of another kind replaces the table: the old kind's arguments would not apply
    other = {"kind": "fedprox_synthetic", "num_clients": 4}
    assert resolve_runs(apply_overrides(CONFIG, [("data", other)]))[0]["data"] == other


def test_set_path_names_the_scalar_in_the_way():
    node = {"a": {"b": 1}}
    with pytest.raises(ConfigError, match="a.b is 1, not a table"):
        set_path(node, "a.b.c", 2)
    with pytest.raises(ConfigError, match="dotted names"):
        set_path(node, "a..c", 2)
    set_path(node, "x.y", 3)
    assert node["x"] == {"y": 3}


def test_select_runs_by_label_panel_label_or_slug():
    assert [r["label"] for r in select_runs(CONFIG, ["A"])["runs"]] == ["A", "A"]
    assert [r["panel"] for r in select_runs(CONFIG, ["P2/A"])["runs"]] == ["P2"]
    assert [r["label"] for r in select_runs(CONFIG, ["p1-b"])["runs"]] == ["B"]
    assert "compare" not in select_runs(CONFIG, ["B"])  # its reference A is gone
    with pytest.raises(ConfigError, match="did you mean 'P1/B'"):
        select_runs(CONFIG, ["P1/C"])


def test_pick_run_refuses_an_ambiguous_label():
    assert run_choices(CONFIG) == ["P1/A", "P1/B", "P2/A"]
    assert pick_run(CONFIG, None) == 0 and pick_run(CONFIG, 2) == 2
    assert pick_run(CONFIG, "B") == 1 and pick_run(CONFIG, "P2/A") == 2
    with pytest.raises(ConfigError, match="ambiguous.*0 \\(P1/A\\), 2 \\(P2/A\\)"):
        pick_run(CONFIG, "A")
    with pytest.raises(ConfigError, match="at most 2"):
        pick_run(CONFIG, 3)


def test_builders_list_their_arguments_and_suggest():
    with pytest.raises(ConfigError) as exc:
        build_algorithm({"kind": "fed_iter_ht", "sparsity": 2, "stepsize": 0.1})
    msg = str(exc.value)
    assert "did you mean 'step_size'" in msg and "local_steps" in msg
    with pytest.raises(ConfigError, match="did you mean 'fed_ht'"):
        build_algorithm({"kind": "fedht"})
    with pytest.raises(ConfigError, match="must be one of"):
        build_algorithm({"kind": ["fed_ht"]})  # unhashable: still a ConfigError


@pytest.mark.parametrize("extra, match", [
    ({"bogus": 1}, r"data 'federated_real' with partition 'iid' takes no argument 'bogus'; "
                   r"its arguments: dataset, partition, .*max_examples"),
    ({"alpha": 0.5}, r"no argument 'alpha' \('alpha' is an option of partition 'dirichlet'\)"),
    ({"partition": "dirichlet", "aplha": 0.5}, r"'aplha' \(did you mean 'alpha'\?\); its "
                                                r"arguments: .*, alpha, min_size, max_tries$"),
    ({"partition": "clusters", "return_groups": True}, r"no argument 'return_groups'"),
    ({"partition": "clusters", "num_client": 3}, r"'num_client' \(did you mean "
                                                  r"'num_clients'\?\)"),
])
def test_a_real_data_table_names_an_unknown_key_and_its_partitions_options(extra, match):
    import torch

    table = {"kind": "federated_real", "dataset": "digits", "partition": "iid",
             "num_clients": 3, "max_examples": 60, **extra}
    with pytest.raises(ConfigError, match=match) as exc:
        build_data(table, torch.float32)
    assert "partition_" not in str(exc.value)  # not the partitioner's own TypeError
    # the library call says it the same way, before it loads the data
    kwargs = {k: v for k, v in table.items() if k not in ("kind", "dataset")}
    with pytest.raises(ConfigError, match=match.replace("data 'federated_real'",
                                                        "federated_real")
                       .replace("dataset, ", "")):
        fs.data.federated_real("digits", **kwargs)


def test_generated_data_that_overflow_name_the_tables_values():
    import torch

    table = {"kind": "shifted_gaussian", "num_clients": 2, "samples_per_client": 5, "dim": 4,
             "sparsity": 2, "alpha": 1e300}
    with pytest.raises(ConfigError, match=r"data 'shifted_gaussian' made values that are not "
                                          r"finite .* data.alpha=1e\+300.* too large for "
                                          r"torch.float32"):
        build_data(table, torch.float32)


def test_a_missing_data_file_suggests_set_data_path(tmp_path):
    import torch

    with pytest.raises(ConfigError, match=r"--set data.path="):
        build_data({"kind": "libsvm_file", "path": str(tmp_path / "none.svm")}, torch.float32)
    with pytest.raises(ConfigError, match=r"--set data.path="):
        build_data({"kind": "federated_real", "dataset": "e2006"}, torch.float32)
    with pytest.raises(ConfigError, match=r"--set data.path=/path/to/folder"):
        build_data({"kind": "ondisk", "path": str(tmp_path / "none")}, torch.float32)


def test_scheduled_channel_table_replays_its_trace():
    import torch

    channel = build_channel({"kind": "scheduled", "delivered": [[1, 0, 1], [0, 1, 1]]})
    clients = torch.tensor([0, 2])
    assert channel.delivered(0, 0, clients).tolist() == [True, True]
    assert channel.delivered(0, 1, clients).tolist() == [False, True]
    with pytest.raises(ConfigError, match="run reached round 3"):
        channel.delivered(0, 2, clients)
    cycled = build_channel({"kind": "scheduled", "delivered": [[True], [False]], "cycle": True})
    assert cycled.delivered(0, 3, torch.tensor([0])).tolist() == [False]


@pytest.mark.parametrize("table", [
    {"kind": "scheduled"},
    {"kind": "scheduled", "delivered": []},
    {"kind": "scheduled", "delivered": [1, 0]},
    {"kind": "scheduled", "delivered": [[1, 0], [1]]},
    {"kind": "scheduled", "delivered": [[1, 2]]},
    {"kind": "scheduled", "delivered": [[0.5, 1]]},
    {"kind": "scheduled", "delivered": [[1, 0]], "cycle": "yes"},
    {"kind": "scheduled", "delivered": [[1, 0]], "probability": 0.5},
])
def test_scheduled_channel_table_errors_name_the_key(table):
    with pytest.raises(ConfigError, match=r"channel\.delivered|channel\.cycle|probability"):
        build_channel(table)
