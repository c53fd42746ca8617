"""tensorplug_adapters.after_import: code run right after a module's import, which it never
imports itself (the torch adapter's registration waits for torch and DTensor this way)."""

import sys

from tensorplug_adapters import after_import


def test_callbacks_run_once_after_the_import_and_the_finder_leaves(tmp_path, monkeypatch):
    (tmp_path / "tp_watched_a.py").write_text("VALUE = 41\n")
    (tmp_path / "tp_watched_b.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def first(module):
        seen.append(("first", module.__name__, module.VALUE))

    def second(module):
        seen.append(("second", module.__name__, module.VALUE))

    try:
        after_import.call_after_import("tp_watched_a", first)
        after_import.call_after_import("tp_watched_a", first)  # waiting already: not added twice
        after_import.call_after_import("tp_watched_a", second)
        after_import.call_after_import("tp_watched_b", first)
        assert "tp_watched_a" not in sys.modules and seen == []
        assert set(after_import.watched()) >= {"tp_watched_a", "tp_watched_b"}
        import tp_watched_a

        assert seen == [("first", "tp_watched_a", 41), ("second", "tp_watched_a", 41)]
        assert tp_watched_a.__spec__.loader is tp_watched_a.__loader__  # the real loader, restored
        assert type(tp_watched_a.__loader__).__name__ == "SourceFileLoader"
        assert "tp_watched_a" not in after_import.watched() and "tp_watched_b" in after_import.watched()
        import tp_watched_b  # noqa: F401

        assert seen[2:] == [("first", "tp_watched_b", 7)]
        assert "tp_watched_b" not in after_import.watched()
        if not after_import.watched():  # nothing else waits: the finder is gone
            assert not any(type(f).__name__ == "_AfterImportFinder" for f in sys.meta_path)
    finally:
        import tp_watched_a, tp_watched_b  # noqa: E401, F401, F811  (a failure above leaves nothing waiting)

        sys.modules.pop("tp_watched_a", None)
        sys.modules.pop("tp_watched_b", None)
