"""Two rule sets for the signal environment: ours (``"study"``) and LibSignal's as implemented.

The OracleTSC paper's baselines come from LibSignal's code. Its implemented rules differ from the
definitions the paper states and we use; ``SignalConfig.rules = "libsignal"`` reproduces them, as
its code stood before its July-2025 change of the phase-time check (``world/world_sumo.py`` at
4dcfde1, the version whose FixedTime equals ours; ``world/world_cityflow.py``, ``agent/*.py`` and
``common/metrics.py`` did not change then). Each rule below is one small function; the
docstrings cite the behaviour. On CityFlow (Hangzhou) its ``world_cityflow.py`` is followed where
it differs from its SUMO world:

========================  ===================================  ==================================  ==========================
rule                      study                                LibSignal, SUMO world               LibSignal, CityFlow world
========================  ===================================  ==================================  ==========================
queue per lane            halting now (< 0.1 m/s), whole lane  waited once, within 200 m (never    halting now, whole lane
                                                               cleared)                            (CityFlow's own count)
pressure                  G and g links, whole lanes,          G links only, vehicles within       every lane link of the
                          in − out                             200 m of their next light (out: 0)  phase, whole lanes, in − out
delay                     lane mean of 1 − v / limit (at      sum over lanes, vehicles within     sum over lanes, whole lane,
                          least 0), mean over lanes            200 m, uncapped                     uncapped
clearance                 yellow where green ends              all-red where green ends; none      the roadnet's all-red phase
                                                               needed: SUMO's program slips 1 s
phase timer               green seconds since the change       seconds since the change began,     the same
                                                               clearance included
departure stamp           insertion time                       end of the insertion step (+1 s)    CityFlow's own travel time
throughput                vehicles arrived                     vehicles arrived                    vehicles that left a lane
========================  ===================================  ==================================  ==========================

LibSignal's RL agents report delay as a mean over incoming roads (its classic agents as a sum
over lanes): :func:`rl_delay`. Run beside LibSignal's own code, ``"libsignal"`` gives its numbers
to every printed digit (``docs/methods.md``; ``tests/signal/test_signal_rules.py``).

A rule set is ``"study"``, ``"libsignal"`` (every part below), or ``"study"`` plus some of
LibSignal's parts, e.g. ``"study+queue+delay"``, to measure one rule's effect at a time
(``tsc_crosscheck``): ``queue``, ``delay``, ``departure`` and ``throughput`` change what is
measured only, ``clearance``, ``timer`` and ``pressure`` (MaxPressure's pressure, SOTL's lanes and
switching test) change the control too.
"""

from __future__ import annotations

from collections.abc import Iterable

RULES = ("study", "libsignal")
PARTS = ("queue", "delay", "departure", "throughput", "clearance", "timer", "pressure")
"""LibSignal's rules one by one (see the module docstring); ``"libsignal"`` is all of them."""
MEASURED = ("queue", "delay", "departure", "throughput")
"""The parts that change only what is measured, not the control."""
DETECT_M = 200.0
"""LibSignal's ``max_distance``: its SUMO world sees a vehicle only when its next traffic light is
at most this far (``World.max_distance``, ``Intersection._get_vehicles``)."""
HALT_SPEED = 0.1
"""Below this speed (m/s) a vehicle halts: SUMO's waiting time and CityFlow's waiting count."""


def parts(rules: str) -> frozenset[str]:
    """LibSignal's parts in a rule set: ``"study"`` none, ``"libsignal"`` all, ``"study+a+b"`` a and b."""
    if rules == "libsignal":
        return frozenset(PARTS)
    head, *rest = rules.split("+")
    unknown = [p for p in rest if p not in PARTS]
    if head != "study" or unknown:
        raise ValueError(f"unknown signal rules {rules!r}; known: {', '.join(RULES)}, or 'study' plus parts "
                         f"joined by '+' ({', '.join(PARTS)})")
    return frozenset(rest)


def check(rules: str) -> str:
    """``rules`` if known, else a ValueError naming the known ones."""
    parts(rules)
    return rules


def has(rules: str, part: str) -> bool:
    """Whether the rule set follows LibSignal in ``part``."""
    return part in parts(rules)


def with_parts(*names: str) -> str:
    """The rule set of the study's rules plus LibSignal's ``names`` (all of them: ``"libsignal"``)."""
    chosen = [p for p in PARTS if p in names]
    if len(chosen) != len(set(names)):
        raise ValueError(f"with_parts: unknown parts {sorted(set(names) - set(PARTS))}; known: {', '.join(PARTS)}")
    return "libsignal" if len(chosen) == len(PARTS) else "+".join(["study", *chosen])


# Queue -------------------------------------------------------------------------------------

def halting(speed: float) -> bool:
    """Study rule, and LibSignal's CityFlow queue: a vehicle queues while slower than 0.1 m/s
    (CityFlow's ``Engine::getLaneWaitingVehicleCount``, which LibSignal's ``lane_waiting_count``
    calls on CityFlow)."""
    return speed < HALT_SPEED


def detectable(to_light_m: float) -> bool:
    """LibSignal's SUMO world sees a vehicle within ``DETECT_M`` of its next traffic light
    (``getNextTLS`` distance <= 200 m; about the distance to the stop line on an incoming lane). A
    vehicle past the only light of the network has none ahead (distance inf) and is never seen."""
    return to_light_m <= DETECT_M


def registers_wait(seen: bool, waiting_s: float) -> bool:
    """LibSignal's SUMO queue record (``Intersection.observe``): a seen vehicle whose SUMO waiting
    time is positive enters ``waiting_times``, and the record is never cleared (the clearing code is
    commented out), so the vehicle counts as waiting from then on, moving or not."""
    return seen and waiting_s > 0


def libsignal_sumo_queue(to_light_m: Iterable[float], waited: Iterable[bool]) -> int:
    """LibSignal's SUMO ``lane_waiting_count`` of one lane: vehicles within 200 m of their next
    light (:func:`detectable`) that have ever registered a wait (:func:`registers_wait`)."""
    return sum(1 for d, w in zip(to_light_m, waited) if detectable(d) and w)


# Delay -------------------------------------------------------------------------------------

def study_lane_delay(speeds: list[float], limit: float) -> float:
    """Study rule: 1 − mean speed / limit over the lane's vehicles, at least 0; an empty lane 0."""
    if not speeds:
        return 0.0
    return 1.0 - min(sum(speeds) / len(speeds) / limit, 1.0)


def libsignal_lane_delay(speeds: list[float], limit: float) -> float:
    """LibSignal's ``get_lane_delay``: 1 − mean speed / limit, uncapped (a vehicle whose speed
    factor exceeds 1 makes it negative); an empty lane 0. Its SUMO world takes the vehicles
    within 200 m, its CityFlow world the whole lane."""
    if not speeds:
        return 0.0
    return 1.0 - sum(speeds) / len(speeds) / limit


def delay(rules: str, lane_delays: dict[str, float]) -> float:
    """The intersection's delay at one decision: study: mean over incoming lanes; LibSignal: the
    sum (``get_delay`` of its FixedTime, MaxPressure and SOTL agents sums the lanes and
    ``Metrics.delay`` averages over decisions only)."""
    values = list(lane_delays.values())
    if has(rules, "delay"):
        return float(sum(values))
    return float(sum(values) / len(values)) if values else 0.0


def road_of(lane: str) -> str:
    """The road (SUMO edge, CityFlow road) of a lane id ``<road>_<index>``."""
    return lane.rsplit("_", 1)[0]


def rl_delay(rules: str, lane_delays: dict[str, float]) -> float:
    """Delay as LibSignal's RL agents report it (``LaneVehicleGenerator(..., average="all")`` in
    ``agent/dqn.py``, ``presslight.py``): the mean over incoming roads of each road's lane mean.
    Study: the same as :func:`delay`."""
    if not has(rules, "delay"):
        return delay(rules, lane_delays)
    roads: dict[str, list[float]] = {}
    for lane, d in lane_delays.items():
        roads.setdefault(road_of(lane), []).append(d)
    return float(sum(sum(v) / len(v) for v in roads.values()) / len(roads)) if roads else 0.0


# Clearance ---------------------------------------------------------------------------------

def yellow_clearance(current: str, nxt: str) -> str:
    """Study rule (SUMO): links green now and next stay as they are, links losing green show
    yellow, the rest red."""
    return "".join(c if c in "Gg" and n in "Gg" else ("y" if c in "Gg" else "r") for c, n in zip(current, nxt))


def all_red_clearance(current: str, nxt: str) -> str | None:
    """LibSignal's SUMO ``create_yellows``: a link green now (``G``/``g``) and red next (``r``/``s``)
    turns ``r``, every other link keeps its current state; ``None`` when no link turns (no
    clearance phase is created for that pair)."""
    out = "".join("r" if c in "Gg" and n in "rs" else c for c, n in zip(current, nxt))
    return None if out == current else out


def libsignal_program(greens: list[str]) -> list[str]:
    """The program LibSignal's SUMO world installs: the green states, then one all-red clearance
    for every ordered pair of greens that needs one (``create_yellows``, ``i``-major order)."""
    clear = [all_red_clearance(a, b) for i, a in enumerate(greens) for j, b in enumerate(greens) if i != j]
    return greens + [c for c in clear if c is not None]


def program_slip(greens: list[str], current: int) -> str:
    """What SUMO shows for the first second of a change that needs no clearance under LibSignal's
    pre-July-2025 timer: ``prep_phase`` sets no phase for such a pair (1 → 0 and 3 → 2 on
    Cologne1), so the program's own step runs out (its green lasts one second, re-armed by
    ``setPhase`` every other second) and SUMO shows the program's next phase for that second. The
    remaining clearance seconds show the current green again (``_change_phase(current_phase)``)."""
    program = libsignal_program(greens)
    return program[(current + 1) % len(program)]


# Phase timer -------------------------------------------------------------------------------

def timer_after_slot(rules: str, timer_s: float, changed: bool, clearance_s: int, decision_s: int) -> float:
    """The phase timer after one decision slot. Study: green seconds of the current phase (a
    change leaves ``decision_s − clearance_s``). LibSignal (``current_phase_time``, SUMO
    ``pseudo_step`` with its ``==`` check, CityFlow ``Intersection.step``): seconds since the
    change began, the clearance included, so a change leaves ``decision_s`` and MaxPressure's
    ``t_min = 10`` lets it change again after 5 s of green."""
    if not changed:
        return timer_s + decision_s
    return float(decision_s if has(rules, "timer") else decision_s - clearance_s)


# Departure stamp ---------------------------------------------------------------------------

def departure_stamp(rules: str, simulator: str, inserted_s: float, step_end_s: float) -> float:
    """When a vehicle's trip starts for its travel time. Study: its insertion time. LibSignal's
    SUMO world stamps it with the time after the step that inserted it (``World.step`` reads
    ``getDepartedIDList`` after ``simulationStep``), one second later. On CityFlow LibSignal
    reports CityFlow's own travel time, from the vehicle's creation (no offset)."""
    if has(rules, "departure") and simulator == "sumo":
        return step_end_s
    return inserted_s


# Pressure (MaxPressure) and SOTL's lanes --------------------------------------------------

def pressure(in_counts: dict[str, int], out_counts: dict[str, int], links: Iterable[tuple[str, str]]) -> int:
    """Σ over the links of (vehicles on the in lane − vehicles on the out lane), one term per link
    (a lane serving two links counts twice, as in LibSignal's ``MaxPressureAgent.get_action``)."""
    return sum(in_counts[a] - out_counts[b] for a, b in links)
