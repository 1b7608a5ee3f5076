"""The live-or-replay switch (labkit.records.session) on the CPU: replaying the newest complete committed run of a
name, or a given run directory, and saying so when there is none."""
from labkit.records import run as results
from labkit.records import session


def test_run_session_replays_the_newest_complete_run(tmp_path):
    old = results.Run.create(tmp_path, "bit_identity", device="cpu")
    old.write("bit_identity", {"cases": []})
    old.close()
    results.Run.create(tmp_path, "bit_identity", device="cpu")  # newer but never closed: not complete
    s = session.RunSession.open("bit_identity", "cpu", tmp_path / "out", runs_root=tmp_path)
    assert not s.live and s.run_id == old.run_id and s.source == f"REPLAYED committed GPU run {old.run_id}"
    assert s.record("bit_identity", lambda: 1 / 0) == {"cases": []}  # never computes on replay
    assert s.record("graph_replay") is None
    assert "REPLAYED" in s.banner()
    none = session.RunSession.open("fast_stats_counterexamples", "cpu", tmp_path / "out", runs_root=tmp_path)
    assert none.replay is None and "no committed GPU run yet" in none.banner()
    assert not (tmp_path / "out").exists()


def test_replaying_session_reads_a_given_run_directory_or_says_there_is_none(tmp_path):
    run = results.Run.create(tmp_path, "replayed", device="cpu")
    run.write("numbers", {"x": [1]})
    run.close()
    given = session.RunSession.replaying("replayed", run.path)
    assert not given.live and given.replay_path == str(run.path)
    assert given.source == f"REPLAYED committed GPU run {run.run_id}"
    assert given.record("numbers") == {"x": [1]} and given.record("absent") is None
    assert given.absent("absent").startswith(f"not in REPLAYED committed GPU run {run.run_id}: the run predates")
    assert given.absent("numbers") == given.source  # there, but nothing to show: the source, as before
    newest = session.RunSession.replaying("replayed", runs_root=tmp_path)  # committed_runs reads tmp_path as data/runs
    assert newest.run_id == run.run_id
    nothing = session.RunSession.replaying("never written", runs_root=tmp_path)
    assert nothing.replay is None and nothing.replay_path is None and "no committed GPU run yet" in nothing.source
