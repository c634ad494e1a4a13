"""Bus systems of the bus-holding study: case 1 (synthetic loop), case 2 (two Beijing lines),
case 3 (six Beijing lines) and the 30 generated systems of §5.5.

A :class:`Scenario` is plain, frozen data; :mod:`llmtraffic.bus.sim` turns it into an episode.
Physical stops are *nodes* (indices into ``Scenario.stop_names``); a line lists the nodes it
serves in travel order, so a node that appears in two lines is a shared stop. Holding agents
sit at nodes (``Scenario.control_stops``).
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import numpy as np

from llmtraffic.study import data_path

HOUR_S = 3600.0
Trip = tuple[float, str, int, int]
"""A fixed passenger: (arrival time s, line name, origin stop index, destination stop index)."""


@dataclass(frozen=True)
class Line:
    """One bus line: its stops, link travel times, dispatching and passenger demand."""

    name: str
    """Identifier, e.g. ``"3436"``; agent names and metrics use it."""
    label: str
    """Name shown in figures and prompts, e.g. ``"line 1"``."""
    nodes: tuple[int, ...]
    """Physical stop (node) of each stop of the line, in travel order."""
    positions_m: tuple[float, ...]
    """Distance of each stop from the line's origin (loops: from the dispatch point), increasing."""
    link_s: tuple[float, ...]
    """Median travel time of each link: stop i → i+1 (open line, n-1 links) or, on a loop,
    n links where the last one wraps from the last stop to the first."""
    headway_s: float
    """Scheduled dispatch headway (also the ``H`` of feedback control)."""
    rates_ph: tuple[tuple[float, ...], ...]
    """Mean passenger arrivals per hour at each stop, one column per simulated hour
    (case 1: hourly factors that multiply a base rate drawn per episode)."""
    od: tuple[tuple[float, ...], ...]
    """Destination probabilities by origin stop (stop indices of this line); rows of stops
    with demand sum to 1; on open lines only downstream stops may have mass."""
    loop_m: float | None = None
    """Length of the loop, or None for an open line that ends at its last stop."""
    access_s: float = 0.0
    """Travel time from the dispatch point to the first stop (case 1 dispatches at 0 m)."""
    first_dispatch_s: float = 0.0
    """Time of the first dispatch; later ones follow every ``headway_s``."""
    n_dispatch: int | None = None
    """Number of dispatched buses; None dispatches until the horizon."""
    preplaced: tuple[int, ...] = ()
    """Stop indices where buses already stand at t = 0, front bus first (case 2: 26, 24, …, 0)."""

    def __post_init__(self) -> None:
        n = len(self.nodes)
        where = f"line {self.name!r}"
        if n < 2:
            raise ValueError(f"{where}: field 'nodes' needs at least 2 stops, got {n}")
        if len(set(self.nodes)) != n:
            raise ValueError(f"{where}: field 'nodes' repeats a stop")
        if len(self.positions_m) != n:
            raise ValueError(f"{where}: field 'positions_m' has {len(self.positions_m)} values for {n} stops")
        if np.any(np.diff(self.positions_m) <= 0):
            raise ValueError(f"{where}: field 'positions_m' must be strictly increasing")
        if self.loop_m is not None and not self.positions_m[-1] < self.loop_m:
            raise ValueError(f"{where}: field 'loop_m' must exceed the last stop position")
        links = n if self.loop_m is not None else n - 1
        if len(self.link_s) != links or min(self.link_s) <= 0:
            raise ValueError(f"{where}: field 'link_s' needs {links} positive travel times")
        if self.headway_s <= 0:
            raise ValueError(f"{where}: field 'headway_s' must be positive")
        rates = np.asarray(self.rates_ph, dtype=float)
        if rates.ndim != 2 or rates.shape[0] != n:
            raise ValueError(f"{where}: field 'rates_ph' must have one row of hourly rates per stop")
        if np.any(rates < 0) or not np.all(np.isfinite(rates)):
            raise ValueError(f"{where}: field 'rates_ph' has negative or non-finite rates")
        self._check_od(rates, where)
        if any(not 0 <= s < n for s in self.preplaced):
            raise ValueError(f"{where}: field 'preplaced' names a stop outside 0..{n - 1}")

    def _check_od(self, rates: np.ndarray, where: str) -> None:
        od = np.asarray(self.od, dtype=float)
        n = len(self.nodes)
        if od.shape != (n, n):
            raise ValueError(f"{where}: field 'od' must be {n}x{n}, got {od.shape}")
        if np.any(od < 0):
            raise ValueError(f"{where}: field 'od' has negative probabilities")
        reachable = np.ones((n, n), bool) if self.loop_m is not None else np.triu(np.ones((n, n), bool), 1)
        np.fill_diagonal(reachable, False)
        if np.any(od[~reachable] > 0):
            raise ValueError(f"{where}: field 'od' puts mass on the origin or on upstream stops")
        sums = od.sum(axis=1)
        bad = [i for i in range(n) if rates[i].sum() > 0 and abs(sums[i] - 1) > 1e-6]
        if bad:
            raise ValueError(f"{where}: field 'od' rows {bad} do not sum to 1 (stops with demand)")

    @property
    def n_stops(self) -> int:
        return len(self.nodes)

    @property
    def is_loop(self) -> bool:
        return self.loop_m is not None


@dataclass(frozen=True)
class Scenario:
    """A bus system and the rules of its simulation (§3.3)."""

    name: str
    """Short identifier used in file names and tables."""
    lines: tuple[Line, ...]
    """The bus lines."""
    stop_names: tuple[str, ...]
    """Name of each physical stop (node)."""
    horizon_s: float
    """Default episode length."""
    control_stops: tuple[int, ...]
    """Nodes where an agent may hold buses (never at a line's last stop)."""
    capacity: int | None = None
    """Passengers a bus can carry; None for no limit (case 1)."""
    board_s: float = 3.0
    """Boarding time per passenger."""
    alight_s: float = 0.0
    """Alighting time per passenger; dwell = max(board_s·boarders, alight_s·alighters)."""
    min_dwell_s: float = 0.0
    """Shortest dwell at a stop (real-world cases: 1 s)."""
    travel_shape: float | None = None
    """Gamma shape of link travel times (mean = the median time); None for deterministic."""
    travel_clip: tuple[float, float] = (0.5, 1.8)
    """Link times are clipped to these multiples of the median time."""
    base_rate: tuple[int, int] | None = None
    """Case 1: per episode each stop draws an integer base rate in [lo, hi] (pax/h) that
    multiplies ``rates_ph``; None uses ``rates_ph`` as rates."""
    rate_jitter: float = 0.0
    """Each hourly rate is multiplied per episode by a uniform factor in [1 - j, 1 + j]."""
    hold_step_s: float = 5.0
    """Length of one holding action (§3.2)."""
    max_hold_s: float = 90.0
    """Holding ends by force after this long."""
    state_dim: int = 6
    """6: the §3.2 state; 3: case 1's [forward, backward, onboard] state of Appendix A.5."""
    empty_stop_dwell: bool = False
    """The authors' case-1 dwell (their ``synthetic_network/testing_simulation.py``): a bus with
    room that finds nobody to board stands at the stop until the next passenger arrives, boards
    everyone there by then (``board_s`` each) and only then departs or is held. False is the
    paper's text (dwell = boarding time, none without boarders)."""
    trips: tuple[Trip, ...] = ()
    """Fixed passengers added to the random demand (for hand-checkable cases)."""
    description: str = ""
    """One paragraph for prompts and figure captions; ``describe()`` returns it."""
    shared_nodes: tuple[int, ...] = field(init=False)
    """Nodes served by more than one line (derived)."""

    def __post_init__(self) -> None:
        if not self.lines:
            raise ValueError(f"scenario {self.name!r}: field 'lines' is empty")
        names = [ln.name for ln in self.lines]
        if len(set(names)) != len(names):
            raise ValueError(f"scenario {self.name!r}: field 'lines' repeats a line name")
        n_nodes = len(self.stop_names)
        for ln in self.lines:
            if any(not 0 <= v < n_nodes for v in ln.nodes):
                raise ValueError(f"line {ln.name!r}: field 'nodes' refers to a stop outside stop_names")
        for v in self.control_stops:
            if not 0 <= v < n_nodes:
                raise ValueError(f"scenario {self.name!r}: field 'control_stops' has unknown stop {v}")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"scenario {self.name!r}: field 'capacity' must be positive or None")
        if self.state_dim not in (3, 6):
            raise ValueError(f"scenario {self.name!r}: field 'state_dim' must be 3 or 6")
        if self.horizon_s <= 0:
            raise ValueError(f"scenario {self.name!r}: field 'horizon_s' must be positive")
        if self.base_rate is not None and not 0 <= self.base_rate[0] <= self.base_rate[1]:
            raise ValueError(f"scenario {self.name!r}: field 'base_rate' must be 0 <= lo <= hi")
        if not 0 <= self.rate_jitter < 1:
            raise ValueError(f"scenario {self.name!r}: field 'rate_jitter' must be in [0, 1)")
        by_name = {ln.name: ln for ln in self.lines}
        for i, (t, line, o, d) in enumerate(self.trips):
            if line not in by_name:
                raise ValueError(f"scenario {self.name!r}: field 'trips' row {i} has unknown line {line!r}")
            n = by_name[line].n_stops
            if not (0 <= o < n and 0 <= d < n and o != d) or t < 0:
                raise ValueError(f"scenario {self.name!r}: field 'trips' row {i} is not a valid trip")
        counts = np.bincount([v for ln in self.lines for v in ln.nodes], minlength=n_nodes)
        object.__setattr__(self, "shared_nodes", tuple(int(v) for v in np.flatnonzero(counts > 1)))

    def describe(self) -> str:
        """One paragraph describing the system (used in LLM prompts)."""
        return self.description

    def line(self, name: str) -> Line:
        """The line called ``name``; ValueError naming the known lines otherwise."""
        for ln in self.lines:
            if ln.name == name:
                return ln
        raise ValueError(f"unknown line {name!r}; scenario {self.name!r} has {[ln.name for ln in self.lines]}")


def _override(scenario: Scenario, overrides: dict) -> Scenario:
    known = {f.name for f in dataclasses.fields(Scenario) if f.init}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown scenario field(s) {unknown}; known: {sorted(known)}")
    return dataclasses.replace(scenario, **overrides)


def _default_control(nodes_by_line: list[tuple[int, ...]], n_nodes: int, loops: list[bool]) -> tuple[int, ...]:
    """Every node where some line can still hold: all stops but a line's last (loops: all)."""
    ok = set()
    for nodes, loop in zip(nodes_by_line, loops):
        ok.update(nodes if loop else nodes[:-1])
    return tuple(v for v in range(n_nodes) if v in ok)


# ---------------------------------------------------------------- case 1 (Appendix A.5, §5.2.1)


def case1(demand_scale: float = 1.0, **overrides) -> Scenario:
    """Synthetic loop of §5.2.1 / Appendix A.5: 10,656 m, 8 stops, 6 buses at 5.55 m/s
    dispatched from 0 m every 320 s, 3 s per boarder, no alighting time, no capacity, 4 h.
    Each stop draws a base rate from the integers 40–180 pax/h per episode, multiplied hour
    by hour by [0.6, 0.8, 1.2, 0.5]; destinations are uniform over the other 7 stops.
    Link times are rounded to microseconds so that 1332 m at 5.55 m/s is exactly 240 s."""
    if demand_scale < 0:
        raise ValueError(f"case1: field 'demand_scale' must be >= 0, got {demand_scale}")
    loop_m, speed, n = 10656.0, 5.55, 8
    positions = tuple(666.0 + 1332.0 * i for i in range(n))
    gaps = np.diff(positions + (positions[0] + loop_m,))
    factors = tuple(demand_scale * f for f in (0.6, 0.8, 1.2, 0.5))
    od = np.full((n, n), 1 / (n - 1))
    np.fill_diagonal(od, 0.0)
    line = Line(
        name="loop", label="loop line", nodes=tuple(range(n)), positions_m=positions,
        link_s=tuple(round(g / speed, 6) for g in gaps), headway_s=320.0,
        rates_ph=(factors,) * n, od=tuple(map(tuple, od)), loop_m=loop_m,
        access_s=round(positions[0] / speed, 6), n_dispatch=6,
    )
    scenario = Scenario(
        name="case1", lines=(line,), stop_names=tuple(f"stop {i}" for i in range(n)),
        horizon_s=4 * HOUR_S, control_stops=tuple(range(n)), base_rate=(40, 180),
        description=(
            "A single cyclic bus line (loop) of 10,656 m with 8 stops at 666, 1998, 3330, 4662, 5994, "
            "7326, 8658 and 9990 m (1,332 m apart) served by 6 buses at a constant 5.55 m/s "
            "(4 minutes between adjacent stops excluding dwell and holding), dispatched from 0 m "
            f"every 320 s. Boarding takes 3.0 s per passenger; alighting takes no time and buses "
            f"have no capacity limit. Passengers arrive at each stop as a Poisson process whose rate "
            f"(40-180 pax/h per stop, scaled by {demand_scale:g}) varies hour by hour over 4 hours and "
            "travel to one of the other stops; they are exogenous to the controller and cannot board "
            "or alight while a bus is held. Every stop is a control point: after boarding, the stop "
            "may hold the bus in 5-s steps for at most 90 s."
        ),
    )
    return _override(scenario, overrides)


# ---------------------------------------------------------------- data (restricted unpickler)

REAL_WORLD_RULES = dict(capacity=120, alight_s=1.8, min_dwell_s=1.0, travel_shape=50.0, rate_jitter=0.1)
"""Operating rules of the real-world cases (§5.3.1, authors' code): capacity 120, dwell
max(3.0 s·boarders, 1.8 s·alighters) and at least 1 s, gamma(50) link times, rates ±10 %."""


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Loads the authors' pickles, which hold lists of Python and numpy scalars only."""

    ALLOWED = {("numpy", "dtype"), ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only numpy scalars are allowed")
        if module == "numpy.core.multiarray":  # numpy 2 moved the module; the pickles predate that
            module = "numpy._core.multiarray"
        return super().find_class(module, name)


def load_pickle(relative: str):
    """Unpickle a data file through :func:`llmtraffic.study.data_path`, allowing numpy scalars only."""
    path = data_path(relative)
    with open(path, "rb") as fh:
        try:
            return _NumpyOnlyUnpickler(fh).load()
        except (pickle.UnpicklingError, EOFError) as err:
            raise ValueError(f"data file {relative}: {err}") from err


def _real_line(
    name: str, label: str, folder: str, suffix: str, nodes: tuple[int, ...], demand_scale: float
) -> Line:
    """A line from the authors' data: positions, median link times, 4 hourly boardings per stop,
    destination shares. Stops without demand get an all-zero destination row (the data holds
    placeholder rows there) and the last stop gets no demand (nobody boards at the terminal)."""
    positions = [float(x) for x in load_pickle(f"{folder}/stops_position_direct_distance_{name}_{suffix}.pkl")]
    links = [float(x) for x in load_pickle(f"{folder}/mid_travel_time_{name}.pkl")]
    rates = np.array(load_pickle(f"{folder}/board_bystop_per_hour_{name}.pkl"), dtype=float)[:, :4]
    od = np.array(load_pickle(f"{folder}/destination_percent_{name}.pkl"), dtype=float)
    rates[-1] = 0.0
    od[rates.sum(axis=1) == 0] = 0.0
    return Line(
        name=name, label=label, nodes=nodes, positions_m=tuple(positions), link_s=tuple(links),
        headway_s=300.0, rates_ph=tuple(map(tuple, rates * demand_scale)), od=tuple(map(tuple, od)),
        first_dispatch_s=300.0, preplaced=tuple(range(len(positions) - 1, -1, -2)),
    )


def _real_world(
    name: str, specs: list[tuple[str, str, str, str]], stop_names: list[list[str]], shared: dict,
    demand_scale: float, shared_share: float | None, description: str, horizon_s: float,
) -> Scenario:
    """Assemble lines whose stops are merged into nodes by ``shared[(line, stop)] = node`` of
    the first line that serves them."""
    node_names: list[str] = []
    node_of: dict[tuple[str, int], int] = {}
    for (line, _, _, _), names in zip(specs, stop_names):
        for i, stop in enumerate(names):
            if (line, i) in shared:
                node_of[(line, i)] = node_of[shared[(line, i)]]
                node_names[node_of[(line, i)]] += f" = {line}/{i}"
            else:
                node_of[(line, i)] = len(node_names)
                node_names.append(f"{line}/{i} {stop}".strip())
    lines = [
        _real_line(line, label, folder, suffix, tuple(node_of[(line, i)] for i in range(len(names))), demand_scale)
        for (line, label, folder, suffix), names in zip(specs, stop_names)
    ]
    if shared_share is not None:
        lines = [_with_shared_share(ln, lines, shared_share) for ln in lines]
    return Scenario(
        name=name, lines=tuple(lines), stop_names=tuple(node_names), horizon_s=horizon_s,
        control_stops=_default_control([ln.nodes for ln in lines], len(node_names), [False] * len(lines)),
        **REAL_WORLD_RULES,
        description=description,
    )


def _with_shared_share(line: Line, lines: list[Line], share: float) -> Line:
    """Make ``share`` of the line's passengers travel within the shared corridor, keeping the
    total constant (§5.3.3). Corridor trips go from a shared stop to a later shared stop. At
    shared origins the destination shares are split into corridor and other trips and reweighted;
    when the shared origins carry too little demand, demand moves to them from the other stops
    (in proportion to their rates)."""
    if not 0 <= share <= 1:
        raise ValueError(f"field 'shared_share' must be in [0, 1], got {share}")
    others = {v for ln in lines if ln is not line for v in ln.nodes}
    shared = np.array([v in others for v in line.nodes])
    corridor = np.triu(np.outer(shared, shared), 1)
    origins = corridor.any(axis=1)
    rates = np.array(line.rates_ph)
    od = np.array(line.od)
    total = rates.sum()
    at_origins = rates[origins].sum()
    if at_origins < share * total:  # move demand onto the shared origins
        rates[origins] *= share * total / at_origins
        rates[~origins] *= (1 - share) * total / rates[~origins].sum()
        weight = 1.0
    else:
        weight = share * total / at_origins
    for i in np.flatnonzero(origins):
        inside, outside = od[i] * corridor[i], od[i] * ~corridor[i]
        inside = inside / inside.sum() if inside.sum() > 0 else corridor[i] / corridor[i].sum()
        od[i] = inside if outside.sum() == 0 else weight * inside + (1 - weight) * outside / outside.sum()
    return dataclasses.replace(line, rates_ph=tuple(map(tuple, rates)), od=tuple(map(tuple, od)))


# ---------------------------------------------------------------- case 2 (§5.3.1)

CASE2_SHARED = ((11, 8), (13, 10), (14, 11), (15, 12), (16, 14), (17, 15), (18, 16), (20, 19))
"""Shared stops (index on line 3436, index on line 3986): the pairs hard-coded in the authors'
real_world/testing_simulation.py (`_shared_stop_ID_in_3436/3986`); the pickles do not hold them."""


def case2(shared_share: float | None = None, demand_scale: float = 1.0, **overrides) -> Scenario:
    """The two Beijing lines of §5.3.1: 3436 ("line 1") and 3986 ("line 52"), 27 stops each,
    8 shared stops, buses every 300 s after 14 buses placed at stops 26, 24, …, 0 at t = 0,
    gamma link times (shape 50), capacity 120, dwell max(3.0 s·boarders, 1.8 s·alighters) ≥ 1 s,
    hourly rates jittered ±10 % per episode. Test episodes last 4 h (training: pass 2 h as
    ``horizon_s`` to the simulator or environment). ``shared_share`` sets the share of each
    line's passengers that travel within the shared corridor (§5.3.3), ``demand_scale`` scales
    all demand."""
    if demand_scale < 0:
        raise ValueError(f"case2: field 'demand_scale' must be >= 0, got {demand_scale}")
    folder = "busholding/pkl/data_case2"
    specs = [("3436", "line 1", folder, "1"), ("3986", "line 52", folder, "1")]
    names = [[""] * 27, [""] * 27]
    shared = {("3986", j): ("3436", i) for i, j in CASE2_SHARED}
    share = "" if shared_share is None else f" {shared_share:.0%} of passengers travel within the shared corridor;"
    description = (
        "Two real bus lines in Beijing (line 1 and line 52), 27 stops each, running the same direction "
        "and sharing a corridor of 8 stops. Buses are dispatched every 5 minutes from each first stop, "
        "carry at most 120 passengers and take 3.0 s per boarder and 1.8 s per alighter (dwell is the "
        "larger of the two). Link travel times vary randomly around observed medians and buses may "
        "overtake. Passengers arrive as Poisson processes with morning-rush-hour rates "
        f"(scaled by {demand_scale:g});{share} passengers whose trip lies within the shared corridor "
        "board the first bus of either line. Every stop except a line's last is a control point: "
        "after boarding and alighting the stop may hold the bus in 5-s steps for at most 90 s."
    )
    scenario = _real_world("case2", specs, names, shared, demand_scale, shared_share, description, 4 * HOUR_S)
    return _override(scenario, overrides)


# ---------------------------------------------------------------- case 3 (§5.4.1)

CASE3_LINES = ("103", "111", "14", "38", "55", "68")


def case3(demand_scale: float = 2.0, lines: tuple[str, ...] = CASE3_LINES, **overrides) -> Scenario:
    """The six Beijing lines of §5.4.1 with the case-2 operating rules. Shared stops are
    *inferred* from identical stop names (the data gives names, not links). The morning
    demand is scaled up so that holding matters (§5.4.1 gives no factor: ``demand_scale``
    defaults to 2, our choice). Headway 300 s and buses placed at every second stop at t = 0
    as in case 2 (our assumption; the authors published no case-3 simulation code)."""
    unknown = [x for x in lines if x not in CASE3_LINES]
    if unknown:
        raise ValueError(f"case3: field 'lines' has unknown line(s) {unknown}; known: {list(CASE3_LINES)}")
    if demand_scale < 0:
        raise ValueError(f"case3: field 'demand_scale' must be >= 0, got {demand_scale}")
    specs, names = [], []
    for line in lines:
        folder = f"busholding/pkl/data_case3/data_line_{line}"
        specs.append((line, f"line {line}", folder, "0"))
        names.append([str(row[0]) for row in load_pickle(f"{folder}/new_line_{line}_stops_info.pkl")])
    first: dict[str, tuple[str, int]] = {}
    shared = {}
    for (line, *_), stops in zip(specs, names):
        for i, stop in enumerate(stops):
            if stop in first and first[stop][0] != line:
                shared[(line, i)] = first[stop]
            first.setdefault(stop, (line, i))
    description = (
        f"Six real bus lines in Beijing ({', '.join(lines)}) with 15-23 stops each; some stops are served "
        "by two to four lines (identified by identical stop names). Buses are dispatched every 5 minutes, "
        "carry at most 120 passengers and take 3.0 s per boarder and 1.8 s per alighter. Link travel "
        "times vary randomly around observed medians and buses may overtake. Passengers arrive as Poisson "
        f"processes with morning-rush-hour rates scaled by {demand_scale:g}; those whose trip is served by "
        "several lines board the first suitable bus. Every stop except a line's last is a control point "
        "where the bus may be held in 5-s steps for at most 90 s."
    )
    scenario = _real_world("case3", specs, names, shared, demand_scale, None, description, 4 * HOUR_S)
    return _override(scenario, overrides)


# ---------------------------------------------------------------- generic systems (§5.5)

N_GENERIC = 30


def generic(index: int, **overrides) -> Scenario:
    """Generated system ``index`` (0–29) of §5.5: 2–10 open lines, 16–25 stops per line,
    100–1,100 departing passengers per stop over 4 h, some shared corridors. Each index seeds its
    own generator, so it always yields the same system. Our generator: stops 300–900 m apart,
    link speeds 5–7 m/s, each line after the first shares a run of 2–5 consecutive stops with an
    earlier line; hourly demand shares from a Dirichlet(4) draw; destinations favour nearby stops
    (weights decay with distance, scale 5 km); headway 240–480 s; case-2 operating rules."""
    if not (isinstance(index, (int, np.integer)) and 0 <= index < N_GENERIC):
        raise ValueError(f"generic: field 'index' must be an integer in 0..{N_GENERIC - 1}, got {index!r}")
    rng = np.random.default_rng([20_250_505, int(index)])
    n_lines = int(rng.integers(2, 11))
    node_names: list[str] = []
    lines: list[Line] = []
    for k in range(n_lines):
        n = int(rng.integers(16, 26))
        nodes = [-1] * n
        if lines:
            host = lines[int(rng.integers(len(lines)))]
            run = int(rng.integers(2, 6))
            start_host = int(rng.integers(0, host.n_stops - run))
            start_own = int(rng.integers(0, n - run))
            nodes[start_own:start_own + run] = host.nodes[start_host:start_host + run]
        for i in range(n):
            if nodes[i] < 0:
                nodes[i] = len(node_names)
                node_names.append(f"L{k}/{i}")
            else:
                node_names[nodes[i]] += f" = L{k}/{i}"
        gaps = rng.uniform(300, 900, n - 1)
        links = gaps / rng.uniform(5, 7, n - 1)
        totals = rng.uniform(100, 1100, n)
        totals[-1] = 0.0
        hourly = rng.dirichlet([4.0] * 4, n) * 4.0
        positions = np.concatenate([[0.0], np.cumsum(gaps)])
        dist = positions[None, :] - positions[:, None]
        od = np.where(dist > 0, np.exp(-dist / 5000.0), 0.0)
        od[-1] = 0.0
        od[:-1] /= od[:-1].sum(axis=1, keepdims=True)
        headway = float(rng.choice([240.0, 300.0, 360.0, 420.0, 480.0]))
        lines.append(Line(
            name=f"L{k}", label=f"line {k + 1}", nodes=tuple(nodes), positions_m=tuple(np.round(positions, 2)),
            link_s=tuple(np.round(links, 1)), headway_s=headway,
            rates_ph=tuple(map(tuple, totals[:, None] / 4.0 * hourly)), od=tuple(map(tuple, od)),
            first_dispatch_s=headway, preplaced=tuple(range(n - 1, -1, -2)),
        ))
    scenario = Scenario(
        name=f"generic{index:02d}", lines=tuple(lines), stop_names=tuple(node_names), horizon_s=4 * HOUR_S,
        control_stops=_default_control([ln.nodes for ln in lines], len(node_names), [False] * n_lines),
        **REAL_WORLD_RULES,
        description=(
            f"A generated bus system with {n_lines} lines of 16-25 stops each; some consecutive stops are "
            "shared by two lines. Buses are dispatched at fixed headways of 4-8 minutes, carry at most 120 "
            "passengers and take 3.0 s per boarder and 1.8 s per alighter. Link travel times vary randomly "
            "and buses may overtake. Each stop sends 100-1,100 passengers over 4 hours (Poisson arrivals); "
            "passengers whose trip several lines serve board the first suitable bus. Every stop except a "
            "line's last is a control point where the bus may be held in 5-s steps for at most 90 s."
        ),
    )
    return _override(scenario, overrides)


def corridor_share(scenario: Scenario) -> float:
    """Share of the expected passengers whose whole trip lies in the shared corridor (between
    two shared stops), over all lines: the quantity §5.3.3 varies."""
    inside = total = 0.0
    shared = set(scenario.shared_nodes)
    for ln in scenario.lines:
        rates = np.asarray(ln.rates_ph).sum(axis=1)
        on = np.array([v in shared for v in ln.nodes])
        inside += float((rates[:, None] * np.asarray(ln.od) * np.outer(on, on)).sum())
        total += float(rates.sum())
    return inside / total


def by_name(case: str, **kwargs) -> Scenario:
    """``case1`` / ``case2`` / ``case3`` / ``generic`` (with ``index``) by name."""
    builders = {"case1": case1, "case2": case2, "case3": case3,
                "generic": generic}
    if case not in builders:
        raise ValueError(f"unknown case {case!r}; known: {sorted(builders)}")
    return builders[case](**kwargs)
