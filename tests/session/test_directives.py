"""A pinned rule is a directive: an instruction to the assistant or a limit on the work, not any
sentence holding "always" / "never" / "must" (LoCoMo's chit-chat pinned ~1 sentence in 10 turns)."""

from __future__ import annotations

import pytest

from mindpalace.session.archived import rule_sentences
from mindpalace.session.directives import is_directive

RULES = [
    "Never book flights on Fridays.", "Always answer in French.", "Please always answer in French.",
    "Never exceed 300 EUR.", "Only red wine.", "Never stop the backup job!",
    "Don't quit the app before saving.", "You must never book red-eye flights!",
    "Always answer in French and never book flights before 9 am.", "Make sure the tests pass first.",
    "From now on, reply in English.", "Remember to cc my manager on every email.",
    "Avoid hotels near the airport.", "And please don't use emojis.", "You must cite the source.",
    "The report must be under 500 words.", "The hotel must be near the station.",
    "The budget is at most 2000 CNY per night.", "Replies should never mention prices.",
    "Remember: you must ask before deleting any file.", "Do not push to main.", "不要在周五订机票。",
    "We must leave by 6 pm on Sunday.", "You should never share the API key.",
]

# Conversation, not instructions: habits, feelings, praise, guesses about the past, advice
# between friends (LoCoMo dev conv-26 / conv-30 and a travel chat written here).
CHAT = [
    "That must have been awesome.", "It must have been special at your wedding.",
    "They brighten up our day and always make us smile.", "I'm always here for you, Mel!",
    "We always look forward to our family camping trip.", "That's a memory I'll never forget.",
    "Must be awesome to see your stuff on display.", "Wow, Jon, you must be so excited!",
    "Seeing your students grow and succeed must be really fulfilling.", "Always here to help.",
    "Combining passions is always cool.", "We should plan a dance session soon!",
    "Love and acceptance should be everyone's right, and I want them to experience it.",
    "It also showed me that tough times don't last - hope and love exist.",
    "Dance floors help avoid injuries and make dancing more enjoyable.",
    "You never shy away from a challenge and always try something new.",
    "Thanks for always being there for me.", "Taking care of ourselves is so important - even if it's not always easy.",
    "I'll do my best to make sure these kids have a safe and loving home.",
    "My sister always orders the fish.", "Paris is always a good idea.",
    "The train must be running late again.", "I never liked museums much, to be honest.",
    "You should totally come with us next time!", "It's a must-have in my life.",
]


@pytest.mark.parametrize("sentence", RULES)
def test_an_instruction_or_a_limit_is_a_directive(sentence: str) -> None:
    assert is_directive(sentence)
    assert rule_sentences(sentence) == [sentence]


@pytest.mark.parametrize("sentence", CHAT)
def test_conversation_in_a_rules_words_is_no_directive(sentence: str) -> None:
    assert not is_directive(sentence)
    assert rule_sentences(sentence) == []
