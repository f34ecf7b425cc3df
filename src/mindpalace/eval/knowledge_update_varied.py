"""The varied knowledge-update generator: LongMemEval-style updates the classic templates lack.

Same output shape as :func:`mindpalace.eval.knowledge_update.generate` (a list of
:class:`~mindpalace.eval.knowledge_update.Conversation`), different text, so the classic set
stays reproducible by seed and the two are reported separately. What it adds:

* other kinds of facts — counts that change by an event ("I have 3 bikes" → "picked up a
  gravel bike, which makes 4"), places of other people ("my sister lives in Denver" → "my
  sister moved to Austin"), jobs, preferences, schedules, names of pets and people, amounts;
* updates phrased without "actually" / "now" / "changed", several per subject;
* updates (and sometimes originals) embedded in a long user message about something else;
* chains: some subjects are updated twice, and the newest must outrank both older values;
* questions paraphrased so that they share no content word with the update;
* distractors: the same attribute of someone else (said before the original), and later
  statements of the user about the same entity but another attribute ("My sister's
  birthday is next Friday" after "My sister moved to Austin": subject drift);
* 4–6 sessions days to weeks apart, long assistant replies that repeat the topic's words.

Deterministic: one ``random.Random(seed)`` drives every choice (same seed → same text).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from mindpalace.eval.knowledge_update_cases import Conversation, Message

Pick = Callable[[random.Random], list[str]]


def _pool(*values: str) -> Pick:
    """Distinct values in random order (old first, then each update)."""
    return lambda rng: rng.sample(list(values), len(values))


def _counts(lo: int, hi: int, step: int = 1) -> Pick:
    """A count that grows by `step` at each update: [n, n + step, n + 2·step, …]."""
    def pick(rng: random.Random) -> list[str]:
        n = rng.randint(lo, hi)
        return [str(n + i * step) for i in range(4)]
    return pick


@dataclass(frozen=True, slots=True)
class Subject:
    """One kind of fact: how it is stated, updated, asked about and confused.

    ``{o}`` is the previous value, ``{v}`` the stated one, ``{who}`` another person.
    """

    name: str
    topic: str  # words the assistant's reply keeps repeating
    pick: Pick
    states: tuple[str, ...]
    updates: tuple[str, ...]
    questions: tuple[str, ...]  # share no content word with any update
    others: tuple[str, ...]  # the same attribute of someone else
    drift: tuple[str, ...]  # the user on the same entity, another attribute


SUBJECTS: tuple[Subject, ...] = (
    Subject("bikes", "cycling gear and bike storage", _counts(2, 4),
            ("I have {o} bikes.", "There are {o} bikes in our garage and all of them are mine.",
             "I own {o} bikes, a road one and the rest for trails."),
            ("I just bought another bike, so {v} now.",
             "Picked up a used gravel bike on Saturday, which makes {v} in the garage.",
             "Couldn't resist the sale, that's bike number {v} for me."),
            ("How many bicycles do I own?", "What is the size of my cycle collection?"),
            ("{who} has {v} bikes too.", "{who} owns {v} bikes, even more of a fan than me."),
            ("I'm planning a long bike ride this weekend.", "My bike helmet strap broke yesterday.")),
    Subject("sister's city", "visiting family and travel between cities",
            _pool("Denver", "Austin", "Seattle", "Boston", "Portland", "Atlanta", "Phoenix"),
            ("My sister lives in {o}.", "My sister has an apartment in {o}.",
             "My sister is in {o}, close to her work."),
            ("My sister moved to {v} last month.", "Helped my sister pack up, she is settled in {v} for good.",
             "My sister took a job in {v} and relocated there."),
            ("Where is my sister based?", "Which city would I fly to if I wanted to see my sibling?"),
            ("{who} lives in {v}.", "{who} has a flat in {v}."),
            ("My sister's birthday is next Friday.", "My sister got engaged, we're all thrilled.")),
    Subject("job", "careers, interviews and workplaces",
            _pool("a nurse", "a data analyst", "a teacher", "a software engineer", "a pharmacist", "an architect"),
            ("I work as {o}.", "My job is {o} at a logistics firm.", "I've been {o} for six years."),
            ("I started a new position as {v} on Monday.",
             "Handed in my notice, from next week I'm {v}.",
             "Got the offer! I'll be working as {v}."),
            ("What do I do for a living?", "What is my current occupation?"),
            ("{who} works as {v}.", "{who} is {v} at a firm downtown."),
            ("My job has been really stressful this month.", "I'm thinking of asking for a raise at work.")),
    Subject("cat's name", "pet care and cat food", _pool("Mochi", "Luna", "Pixel", "Saffron", "Tiger", "Olive"),
            ("Our cat is called {o}.", "We adopted a kitten and named her {o}.", "My cat {o} sleeps all day."),
            ("The kids insisted on renaming the cat {v}.", "The cat goes by {v} these days, {o} never stuck.",
             "We started calling the cat {v} and she answers to it."),
            ("What's the name of our feline?", "What do we call our pet?"),
            ("{who}'s cat is called {v}.", "{who} named their cat {v}."),
            ("Our cat threw up on the rug again.", "The cat needs her vaccinations in spring.")),
    Subject("commute", "commuting, traffic and transit passes",
            _pool("the bus", "the train", "my bike", "the car", "the ferry"),
            ("I take {o} to work.", "My commute is by {o}, about forty minutes.", "I get to the office by {o}."),
            ("Since the move I ride {v} into town every morning.",
             "Sold my season pass, I'm using {v} for the trip downtown.",
             "Switched to {v} for getting in, much less stressful."),
            ("How do I travel to my workplace?", "What transport do I use on weekdays?"),
            ("{who} takes {v} to work.", "{who} commutes by {v}."),
            ("The office is getting a new parking garage.", "My office moved to the fifth floor.")),
    Subject("yoga class", "stretching, flexibility and fitness classes",
            _pool("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"),
            ("My yoga class is on {o} evenings.", "I do yoga every {o} after work.",
             "Yoga with Marta is on {o}."),
            ("The studio shifted yoga to {v} evenings.", "Marta's yoga class is on {v} from this week.",
             "I signed up for the {v} session instead of {o}."),
            ("Which evening is my stretching class?", "On what weekday do I practise?"),
            ("{who} goes to yoga on {v}.", "{who}'s pilates is every {v}."),
            ("I bought a new yoga mat, a purple one.", "Yoga has really helped my back.")),
    Subject("favourite cuisine", "cooking, recipes and restaurants",
            _pool("Thai", "Italian", "Mexican", "Japanese", "Ethiopian", "Lebanese"),
            ("My favourite cuisine is {o}.", "I love {o} food more than anything.",
             "{o} is what I'd eat every day if I could."),
            ("I've gone off {o}; {v} food is what I crave most.",
             "After that trip, {v} dishes are my top pick.",
             "These days I'd pick {v} over anything else."),
            ("What kind of meal do I like best?", "Which cooking style is my top choice for dinner out?"),
            ("{who} loves {v} food.", "{who}'s favourite cuisine is {v}."),
            ("I'm trying to cook at home more often.", "I burned the rice last night.")),
    Subject("best friend", "friendship and social plans",
            _pool("Hannah", "Carlos", "Mei", "Tobias", "Amara", "Jonah"),
            ("My best friend is {o}.", "{o} and I have been best friends since school.",
             "I tell {o} everything, she is my best friend."),
            ("{v} and I have become inseparable, she's my closest friend these days.",
             "Honestly {v} is the one I call first about anything.",
             "{o} and I drifted apart; {v} is my person."),
            ("Who is my closest pal?", "Whom do I rely on most among people I know?"),
            ("{who}'s best friend is {v}.", "{who} hangs out with {v} all the time."),
            ("We're throwing a surprise party for a friend.", "I need a gift idea for a friend's wedding.")),
    Subject("rent", "housing costs and budgeting", _counts(1200, 1900, 150),
            ("My rent is ${o} a month.", "I pay ${o} monthly for the flat.", "The apartment costs me ${o} a month."),
            ("The landlord raised it to ${v} from next month.",
             "Renewed the lease at ${v}, ugh.", "The new lease says ${v} per month."),
            ("How much do I pay for housing?", "What does my place cost me?"),
            ("{who} pays ${v} rent.", "{who}'s flat is ${v} a month."),
            ("My landlord finally fixed the heating.", "The apartment gets great light in the mornings.")),
    Subject("weekly running distance", "running, training plans and shoes", _counts(15, 30, 5),
            ("I run {o} km a week.", "My weekly mileage is {o} km.", "I'm doing {o} km of running each week."),
            ("Upped my weekly total to {v} km.", "Training plan has me at {v} km per week.",
             "I'm covering {v} km every week since the new plan."),
            ("How far do I jog in seven days?", "What distance do I cover on foot in a typical week?"),
            ("{who} runs {v} km a week.", "{who} does {v} km weekly."),
            ("My running shoes are worn out.", "I'm signed up for a charity run in June.")),
    Subject("language", "language learning apps and lessons",
            _pool("Spanish", "German", "Japanese", "Portuguese", "Korean", "Italian"),
            ("I'm learning {o}.", "I take {o} lessons on Thursdays.", "I'm studying {o} with an app."),
            ("Dropped {o} and signed up for {v} lessons.", "My tutor is teaching me {v} from this month.",
             "Switched to {v}, the grammar clicks better."),
            ("Which tongue am I studying?", "What foreign vocabulary am I practising?"),
            ("{who} is learning {v}.", "{who} speaks {v} fluently."),
            ("My language app streak is at 100 days.", "Lessons are getting harder this month.")),
    Subject("doctor", "health checkups and clinics", _pool("Okafor", "Lindqvist", "Moreau", "Tanaka", "Reyes"),
            ("My doctor is Dr. {o}.", "I see Dr. {o} for checkups.", "Dr. {o} has been my GP for years."),
            ("Switched GPs, I see Dr. {v} from now on.", "Dr. {o} retired, so Dr. {v} took over my care.",
             "Registered with Dr. {v} at the new clinic."),
            ("Who is my physician?", "Which medic looks after my health?"),
            ("{who}'s doctor is Dr. {v}.", "{who} sees Dr. {v}."),
            ("I have a checkup at the clinic next month.", "The doctor said my blood pressure is fine.")),
    Subject("phone", "smartphones, apps and batteries",
            _pool("an iPhone 12", "a Pixel 7", "a Galaxy S21", "a Fairphone 4", "a OnePlus 9"),
            ("I use {o}.", "My phone is {o}.", "I've had {o} for two years."),
            ("Finally replaced it with {v}.", "Treated myself to {v} last week.", "Upgraded to {v} over the weekend."),
            ("What smartphone do I carry?", "Which handset is mine?"),
            ("{who} uses {v}.", "{who} just got {v}."),
            ("My phone battery drains fast.", "I dropped my phone and cracked the case.")),
    Subject("wake-up time", "sleep routines and mornings",
            _pool("6:00", "6:30", "7:00", "7:30", "5:45", "8:00"),
            ("I wake up at {o} every day.", "My alarm is set for {o}.", "I get up at {o} on weekdays."),
            ("The new schedule means my alarm goes off at {v}.", "Since the baby arrived I'm up at {v}.",
             "I moved my alarm to {v}."),
            ("What time do I rise in the morning?", "When does my day start?"),
            ("{who} wakes up at {v}.", "{who} is up at {v} every day."),
            ("I've been sleeping badly this week.", "I love slow weekend mornings.")),
    Subject("houseplants", "plants, watering and potting soil", _counts(3, 8, 2),
            ("I have {o} houseplants.", "There are {o} plants in my apartment.", "I look after {o} houseplants."),
            ("Bought two more ferns, {v} in total.", "After the garden centre trip it's {v} pots on the sill.",
             "Got two cuttings from a friend, so {v} altogether."),
            ("How much greenery do I keep indoors?", "How many green things do I water at home?"),
            ("{who} has {v} houseplants.", "{who} keeps {v} plants."),
            ("One of my plants has yellow leaves.", "I need a bigger pot for the monstera.")),
)

_OTHERS = ("My brother", "My neighbour", "A colleague", "My cousin", "My partner")
_SMALL_TALK = (
    "Morning!", "Thanks, that's useful.", "Haha, true.", "Can you keep that in mind?", "Long day today.",
    "What's a good book for a flight?", "Any ideas for a rainy Sunday?", "I'll think about it.",
    "Remind me to call the bank.", "What should I make for lunch?", "Is it worth getting a standing desk?",
)
_ASIDES = (
    "Can you help me plan a dinner for Saturday? I'm thinking of six guests, a big lasagna, a green "
    "salad and something simple for dessert, maybe a lemon tart if I have time.",
    "I need to write a short speech for my colleague's farewell. She has been on the team for nine "
    "years, loves hiking and terrible puns, and I want it to be warm but not too long.",
    "What's a sensible way to split chores with roommates? We keep arguing about the dishes and the "
    "bins, and a rota on the fridge lasted exactly one week.",
    "Could you suggest a packing list for a three-day conference? It's a mix of talks and evening "
    "dinners, and I only want to bring a carry-on bag.",
    "I want to start journaling again. Last time I gave up after a fortnight because I tried to write "
    "a full page every night, which was far too ambitious.",
    "Give me some ideas for a budget weekend trip. Trains are fine, I'd like a small town with a "
    "market and maybe a museum, nothing too touristy.",
)
_REPLY = (
    "When it comes to {topic}, a little planning goes a long way.",
    "Many people find {topic} easier once there is a simple routine around it.",
    "It is worth keeping notes about {topic} in one place so decisions later are quicker.",
    "There are a few practical points about {topic} to consider before anything else.",
    "If something about {topic} changes, tell me and I will keep the newest details in mind.",
    "A reminder in your calendar usually prevents surprises.",
    "It can help to share the plan with anyone else who depends on it.",
    "Let me know if you would like a checklist or a short summary of the options.",
    "Small adjustments like this are common, and it is sensible to revisit them now and then.",
    "You might also compare how this fits with the rest of your week.",
    "I can suggest some questions to ask so nothing important gets missed.",
    "Budget, time and energy are the three things most plans about {topic} come down to.",
)


def _reply(rng: random.Random, topic: str) -> str:
    """A long assistant reply (≈ 150–300 words) that repeats the topic and states no value."""
    body = " ".join(rng.choice(_REPLY).format(topic=topic) for _ in range(rng.randint(10, 19)))
    return f"{rng.choice(['Good to know.', 'Thanks for sharing that.', 'Understood.', 'Sure.'])} {body}"


def _embed(rng: random.Random, statement: str) -> str:
    """`statement` inside a long message about something else (before, after or in between)."""
    aside = rng.choice(_ASIDES)
    where = rng.randrange(3)
    if where == 0:
        return f"{statement} Anyway, different topic. {aside}"
    if where == 1:
        return f"{aside} Oh, one more thing: {statement}"
    first, _, rest = aside.partition(". ")
    return f"{first}. By the way: {statement} {rest}"


def generate_varied(seed: int = 7, conversations: int = 40, subjects_per_conversation: int = 4) -> list[Conversation]:
    """Deterministic varied conversations (same seed → same text), one user each.

    Each conversation has ``subjects_per_conversation`` cases; ``Conversation.cases`` holds
    (subject, question, original position, newest update position, same session) and
    ``Conversation.stale`` the positions of every older value of each case (the original and
    any intermediate update), all of which the newest update must outrank.

    Raises:
        ValueError: `subjects_per_conversation` is not in 1..len(SUBJECTS) or `conversations` < 0.
    """
    if not 1 <= subjects_per_conversation <= len(SUBJECTS):
        raise ValueError(f"subjects_per_conversation must be in 1..{len(SUBJECTS)}, got {subjects_per_conversation}")
    if conversations < 0:
        raise ValueError(f"conversations must be >= 0, got {conversations}")
    rng = random.Random(seed)
    start = datetime(2024, 3, 4, 8, 30, tzinfo=UTC)
    out: list[Conversation] = []
    for c in range(conversations):
        conv = Conversation(f"user-{c:03d}")
        n_sessions = rng.randint(4, 6)
        sessions: list[list[tuple[str, int | None, str, str]]] = [[] for _ in range(n_sessions)]
        picked = rng.sample(SUBJECTS, subjects_per_conversation)
        plans: list[tuple[Subject, str, int]] = []  # subject, question, number of updates
        for i, subj in enumerate(picked):
            values = subj.pick(rng)
            n_updates = 2 if rng.random() < 0.25 else 1
            s = rng.randint(0, n_sessions - 2)
            if rng.random() < 0.5:  # the same attribute of someone else, said first
                who = rng.choice(_OTHERS)
                sessions[s].append(("near", None, rng.choice(subj.others).format(who=who, v=values[-1]), subj.topic))
            state = rng.choice(subj.states).format(o=values[0], v=values[0])
            if rng.random() < 0.2:
                state = _embed(rng, state)
            sessions[s].append(("orig", i, state, subj.topic))
            for u in range(1, n_updates + 1):
                s = s if rng.random() < 0.2 else rng.randint(s + 1, n_sessions - 1) if s + 1 < n_sessions else s
                text = rng.choice(subj.updates).format(o=values[u - 1], v=values[u])
                if rng.random() < 0.4:
                    text = _embed(rng, text)
                sessions[s].append((f"upd{u}", i, text, subj.topic))
            if rng.random() < 0.6:  # the same entity, another attribute, said after the update
                sessions[rng.randint(s, n_sessions - 1)].append(("drift", None, rng.choice(subj.drift), subj.topic))
            plans.append((subj, rng.choice(subj.questions), n_updates))
        for sess in sessions:
            for _ in range(rng.randint(2, 5)):
                sess.insert(rng.randint(0, len(sess)), ("talk", None, rng.choice(_SMALL_TALK), "everyday life"))
        _keep_order(sessions)
        positions: dict[tuple[str, int], int] = {}
        when = start + timedelta(days=40 * c)
        for n, sess in enumerate(sessions):
            when += timedelta(days=rng.randint(2, 21), hours=rng.randint(0, 9))
            for kind, j, text, topic in sess:
                if j is not None:
                    positions[(kind, j)] = len(conv.messages)
                conv.messages.append(Message(f"s{n + 1}", "user", text, when))
                when += timedelta(minutes=rng.randint(1, 3))
                conv.messages.append(Message(f"s{n + 1}", "assistant", _reply(rng, topic), when))
                when += timedelta(minutes=rng.randint(1, 4))
        for i, (subj, question, n_updates) in enumerate(plans):
            older = [positions[("orig", i)]] + [positions[(f"upd{u}", i)] for u in range(1, n_updates)]
            newest = positions[(f"upd{n_updates}", i)]
            same = conv.messages[older[0]].session == conv.messages[newest].session
            conv.cases.append((subj.name, question, older[0], newest, same))
            conv.stale.append(tuple(older))
        out.append(conv)
    return out


def _keep_order(sessions: list[list[tuple[str, int | None, str, str]]]) -> None:
    """Inside each session, a subject's statements in order (original, update 1, update 2) and
    its drift statement after them; the random small-talk inserts may have shuffled them."""
    rank = {"near": 0, "orig": 1, "upd1": 2, "upd2": 3}
    for sess in sessions:
        ordered = sorted((p for p, e in enumerate(sess) if e[1] is not None),
                         key=lambda p: (rank[sess[p][0]], p))
        by_subject: dict[int, list[int]] = {}
        for p in ordered:
            j = sess[p][1]
            assert j is not None
            by_subject.setdefault(j, []).append(p)
        new = list(sess)
        for slots in by_subject.values():
            for slot, p in zip(sorted(slots), slots, strict=True):
                new[slot] = sess[p]
        sess[:] = new
