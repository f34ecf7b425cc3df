"""Is a sentence a directive — an instruction to the assistant or a limit on the work?

The archived-context block pins the rules a user stated (:func:`mindpalace.session.archived.
rule_sentences`), so a later summary cannot drop them. A rule word alone ("always", "never",
"must") does not make a rule: in conversation most such sentences are habits ("We always look
forward to it"), feelings ("I'll never forget it"), praise ("You never shy away from a
challenge") or guesses about the past ("That must have been awesome"). A directive has one of
these shapes:

- an **imperative** opening with a rule word: "Never book …", "Always answer …", "Don't …",
  "Only red wine.", "Make sure …", "Remember to …", "Avoid …", "From now on …" (after a
  "please" / "and" / "also" …);
- an **obligation addressed to the listener**: "You must …", "You need to …", "You have to …",
  "You should never / not / always / only …" ("You should totally come!" is advice);
- a **prohibition** anywhere: "must not", "should never", "shouldn't", "not allowed", "is
  forbidden" (not "shouldn't have" — a regret);
- an **obligation on a thing**: "The report must be under 500 words", "The hotel must be near
  the station" — not when the subject is a pronoun ("That must be fun", "It must have been
  hard") or the verb is a guess ("must have", "must be so …", "must be running");
- a **limit with a number**: a rule word (only, at most, no more than, must, budget …) next to
  a digit: "We must leave by 6 pm", "The budget is at most 2000 CNY";
- a sentence in Chinese with a rule marker (必须, 不要, 不能, 只能, 至多, 至少, 禁止).

Pure functions of the sentence's text; no state, no I/O.
"""

from __future__ import annotations

import re
from typing import Final

# Words a directive may open with before its rule word: "Please always …", "And don't …".
_LEAD: Final = r"^(?:(?:please|pls|and|also|so|but|ok|okay|oh|now|just|then|again|hey|remember)\b[\s,:;.!-]*)*"
# "always" opening a verbless praise or a promise ("Always here to help") is no instruction.
_NOT_AFTER_ALWAYS: Final = (r"(?!\s+(?:here|there|around|been|a|an|the|so|such|good|great|nice|fun|"
                            r"cool|happy|glad|ready|proud|special|worth|love)\b)")
_IMPERATIVE: Final = re.compile(
    _LEAD + r"(?:never|always" + _NOT_AFTER_ALWAYS + r"|only|don't|don’t|do not|dont|make sure|"
    r"be sure to|remember to|avoid|from now on|under no circumstances)\b",
    re.IGNORECASE,
)
_ADDRESSED: Final = re.compile(
    r"\byou\s+(?:must(?!\s*(?:'ve|’ve|have|be)\b)|need to|have to|will need to|shall|"
    r"should\s+(?:never|not|always|only)\b)",
    re.IGNORECASE,
)
_PROHIBITION: Final = re.compile(
    r"\b(?:must not|mustn't|must never|shall not|shan't|should never|should not|shouldn't|"
    r"not allowed|is forbidden|are forbidden|is not permitted|are not permitted)\b(?!\s+have\b)",
    re.IGNORECASE,
)
# "<a thing> must …": the subject is not a pronoun and the verb is not a guess.
_THING_MUST: Final = re.compile(
    r"^(?!(?:i|we|you|it|that|this|they|he|she|there|which|what|who|must)\b)[^,;]*?\b"
    r"(?:must|has to|needs to)\b"
    r"(?!\s*(?:'ve|’ve|have|feel|know|think|mean)\b)"
    r"(?!\s+be\s+(?:so|really|very|such|pretty|quite|super|totally|incredibly|a|an|[a-z]+ing)\b)",
    re.IGNORECASE,
)
_LIMIT_WORD: Final = re.compile(
    r"\b(?:must|only|at most|at least|no more than|no less than|not exceed|never exceed|"
    r"up to|budget|deadline|maximum|minimum|max|min)\b",
    re.IGNORECASE,
)
_DIGIT: Final = re.compile(r"\d")
_CHINESE_RULE: Final = re.compile(r"必须|不要|不能|只能|至多|至少|禁止")


def is_directive(sentence: str) -> bool:
    """True when `sentence` instructs the assistant or limits the work (the shapes in the
    module docstring); False for conversation that only uses a rule's words.

    Args:
        sentence: one sentence (the caller splits text; a question or a story about the past is
            filtered by the caller too — see ``rule_sentences``).
    """
    s = sentence.strip()
    return bool(
        _CHINESE_RULE.search(s) or _IMPERATIVE.search(s) or _ADDRESSED.search(s)
        or _PROHIBITION.search(s) or _THING_MUST.search(s)
        or (_DIGIT.search(s) and _LIMIT_WORD.search(s))
    )
