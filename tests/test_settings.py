"""Settings: mindpalace.toml + MINDPALACE_* env vars; bad values name file, key and type."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.errors import ConfigError, SchemaVersionError
from mindpalace.scope import Scope
from mindpalace.settings import CONFIG_FILENAME, Settings, default_toml, load_settings
from mindpalace.store.sqlite import SCHEMA_VERSION, SQLiteStore


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("MINDPALACE_") and name.upper() != "MINDPALACE_SHARED_DATA":
            monkeypatch.delenv(name)


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / CONFIG_FILENAME
    path.write_text(text, encoding="utf-8")
    return path


class TestCorruptConfig:
    def test_bad_toml_names_the_file(self, tmp_path: Path) -> None:
        path = write_config(tmp_path, "[steps\nbudget_tokens = 3\n")
        with pytest.raises(ConfigError, match="not valid TOML") as info:
            load_settings(path)
        assert info.value.file == str(path) and str(path) in str(info.value)

    @pytest.mark.parametrize(("section", "key", "value"), [
        ("steps", "budget_tokens", "5000"), ("steps", "budget_tokens", True),
        ("lineage", "enabled", "yes"), ("lineage", "enabled", 1),
        ("facts", "importance_threshold", "0.7"), ("facts", "importance_threshold", False),
    ])
    def test_a_number_or_flag_of_another_type_is_refused_not_coerced(
            self, tmp_path: Path, section: str, key: str, value: object) -> None:
        # a new user's finding: "5" and True were taken as ints, "yes" as a bool
        with pytest.raises(ConfigError, match=f"expected .*got {type(value).__name__}") as info:
            load_settings(None, **{section: {key: value}})
        assert (info.value.file, info.value.key) == ("arguments", f"{section}.{key}")
        toml_value = f'"{value}"' if isinstance(value, str) else str(value).lower()
        path = write_config(tmp_path, f"[{section}]\n{key} = {toml_value}\n")
        with pytest.raises(ConfigError) as info:
            load_settings(path)
        assert (info.value.file, info.value.key) == (str(path), f"{section}.{key}")

    def test_environment_text_is_still_parsed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("MINDPALACE_STEPS__BUDGET_TOKENS", "5000")
        monkeypatch.setenv("MINDPALACE_LINEAGE__ENABLED", "false")
        got = load_settings(None, facts={"importance_threshold": 1})  # an int for a float is fine
        assert (got.steps.budget_tokens, got.lineage.enabled, got.facts.importance_threshold) == (5000, False, 1.0)

    def test_wrong_type_names_file_key_and_expected_type(self, tmp_path: Path) -> None:
        path = write_config(tmp_path, '[steps]\nbudget_tokens = "abc"\n')
        with pytest.raises(ConfigError) as info:
            load_settings(path)
        err = info.value
        assert (err.file, err.key) == (str(path), "steps.budget_tokens")
        assert "expected int >= 50" in err.problem and "'abc'" in err.problem
        assert str(err).startswith(f"{path}: setting 'steps.budget_tokens': expected int")

    @pytest.mark.parametrize(
        ("toml", "key", "expected"),
        [
            ("[steps]\nbudget_tokens = 10\n", "steps.budget_tokens", "int >= 50"),
            ('[store]\nsynchronous = "MAYBE"\n', "store.synchronous", "one of 'OFF'"),
            ('[steps]\nwarn_ratio = "x"\n', "steps.warn_ratio", "float > 0"),
            ("steps = 3\n", "steps", "a [steps] table"),
        ],
    )
    def test_out_of_range_and_wrong_shape_values(
        self, tmp_path: Path, toml: str, key: str, expected: str
    ) -> None:
        with pytest.raises(ConfigError) as info:
            load_settings(write_config(tmp_path, toml))
        assert info.value.key == key and f"expected {expected}" in info.value.problem

    def test_unknown_keys_are_refused_not_ignored(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=r"steps\.budget_tokenz"):
            load_settings(write_config(tmp_path, "[steps]\nbudget_tokenz = 100\n"))

    def test_opening_a_workspace_with_a_corrupt_config_fails_cleanly(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        Memory.open(ws).close()
        (ws / CONFIG_FILENAME).write_text('[steps]\nbudget_tokens = "abc"\n', encoding="utf-8")
        with pytest.raises(ConfigError, match="budget_tokens"):
            Memory.open(ws)


class TestPrecedence:
    def test_env_var_overrides_the_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        path = write_config(tmp_path, "[steps]\nbudget_tokens = 3000\nwarn_ratio = 0.5\n")
        monkeypatch.setenv("MINDPALACE_STEPS__BUDGET_TOKENS", "4000")
        s = load_settings(path)
        assert (s.steps.budget_tokens, s.steps.warn_ratio) == (4000, 0.5)

    def test_arguments_override_env_and_merge_with_file_sections(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = write_config(tmp_path, "[embed]\ndimensions = 32\n")
        monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "none")
        s = load_settings(path, embed={"provider": "hashing"})
        assert (s.embed.provider, s.embed.dimensions) == ("hashing", 32)

    def test_bad_env_value_is_blamed_on_the_env_var(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("MINDPALACE_STEPS__BUDGET_TOKENS", "abc")
        with pytest.raises(ConfigError) as info:
            load_settings(write_config(tmp_path, ""))
        assert info.value.file == "environment MINDPALACE_STEPS__BUDGET_TOKENS"

    def test_an_unknown_tokenizer_is_blamed_on_its_source_when_loading(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("MINDPALACE_TOKENS__TOKENIZER", "gpt2")
        with pytest.raises(ConfigError) as info:
            load_settings(write_config(tmp_path, ""))
        assert (info.value.file, info.value.key) == ("environment MINDPALACE_TOKENS__TOKENIZER", "tokens.tokenizer")
        assert "o200k_base" in info.value.problem

    def test_bad_argument_is_blamed_on_the_arguments(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError) as info:
            load_settings(write_config(tmp_path, ""), steps={"budget_tokens": -1})
        assert (info.value.file, info.value.key) == ("arguments", "steps.budget_tokens")

    def test_missing_file_gives_defaults(self, tmp_path: Path) -> None:
        assert load_settings(tmp_path / "absent.toml") == Settings()

    def test_default_toml_is_valid_and_all_commented(self, tmp_path: Path) -> None:
        s = load_settings(write_config(tmp_path, default_toml()))
        assert s == Settings()
        assert "budget_tokens = 2000" in default_toml()


class TestNewerSchema:
    @pytest.mark.parametrize("folder", ["ws", "odd #name?/ws"])
    def test_newer_database_is_refused_and_left_byte_identical(
        self, tmp_path: Path, folder: str
    ) -> None:
        ws = tmp_path / folder
        Memory.open(ws).close()
        db = ws / "memory.db"
        conn = sqlite3.connect(db)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION + 5,))
        conn.commit()
        conn.close()
        before = hashlib.sha256(db.read_bytes()).hexdigest()
        files = sorted(p.name for p in ws.iterdir())
        with pytest.raises(SchemaVersionError, match=f"schema version {SCHEMA_VERSION + 5}") as info:
            Memory.open(ws)
        assert "upgrade mindpalace" in str(info.value) and "Nothing was written" in str(info.value)
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before
        assert sorted(p.name for p in ws.iterdir()) == files  # no -wal / -shm left behind
        assert sorted(p.name for p in ws.parent.iterdir()) == ["ws"]  # and no stray files

    def test_newer_version_seen_only_inside_the_wal_is_refused(self, tmp_path: Path) -> None:
        db = tmp_path / "memory.db"
        first = SQLiteStore(db)
        first.kv_get(Scope("t", "u", "", ""), "ns", "k")  # keep a connection open: the WAL stays
        other = sqlite3.connect(db)
        other.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION + 1,))
        other.commit()
        try:
            with pytest.raises(SchemaVersionError):
                SQLiteStore(db)
        finally:
            other.close()
            first.close()


class TestDocumentation:
    def test_every_setting_has_a_description_and_appears_in_the_default_toml(self) -> None:
        toml = default_toml()
        for section, field in Settings.model_fields.items():
            assert f"[{section}]" in toml
            for name, setting in field.annotation.model_fields.items():
                assert setting.description, f"{section}.{name} has no description"
                assert f"# {name} =" in toml, f"{section}.{name} missing from default_toml()"


class TestRenamedSummaryMinimum:
    def test_an_old_key_still_loads_with_a_visible_warning(self) -> None:
        with pytest.warns(FutureWarning, match="summary.min_tokens"):
            s = load_settings(None, steps={"min_summary_tokens": 7})
        assert s.summary.min_tokens == 7

    def test_the_new_key_wins_over_an_old_one(self) -> None:
        with pytest.warns(FutureWarning):
            s = load_settings(None, summary={"min_tokens": 12}, session={"summary_min_tokens": 7})
        assert s.summary.min_tokens == 12

    def test_two_old_keys_that_disagree_are_refused(self) -> None:
        with pytest.raises(ConfigError, match="disagree"):
            load_settings(None, steps={"min_summary_tokens": 5}, session={"summary_min_tokens": 30})
