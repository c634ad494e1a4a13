"""Single-intersection scenarios: LibSignal's Cologne1 (SUMO) and Hangzhou 1x1 (CityFlow), a synthetic one.

The OracleTSC study (§4.1.1) runs on LibSignal's Cologne1 (SUMO) and CityFlow 1x1 (Hangzhou,
CityFlow) intersections; ``hangzhou1x1`` is the latter on CityFlow, as in the paper, and
``hangzhou1x1_sumo`` LibSignal's SUMO conversion of the same network and flows, to show how much
the simulator matters. Any CityFlow config or roadnet with one signalised intersection works
too (:class:`CityFlowScenario`). ``synthetic`` is a four-arm intersection with a
through and a left-turn lane per approach and eight phases like Hangzhou 1x1, built at run time
with ``netconvert`` from XML written here, with seeded Poisson demand per movement; it needs no
data files. Any other ``.sumocfg`` with one signalised intersection works too: the environment
discovers phases and lanes from the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from llmtraffic.study import data_path
from llmtraffic.study.atomic import atomic_write_text

HANGZHOU = "libsignal/hangzhou_1x1_bc-tyc_18041610_1h"
FILES = {
    "cologne1": "libsignal/cologne1/cologne1.sumocfg",
    "hangzhou1x1_sumo": f"{HANGZHOU}/hangzhou_1x1_bc-tyc_18041610_1h.sumocfg",
}
"""Named SUMO scenarios shipped as LibSignal data files (paths inside the data directory)."""
CITYFLOW_FILES = {"hangzhou1x1": (f"{HANGZHOU}/roadnet.json", f"{HANGZHOU}/flow.json")}
"""Named CityFlow scenarios: (roadnet, flow) inside the data directory."""


@dataclass(frozen=True)
class Scenario:
    """A SUMO scenario given by a ``.sumocfg`` file."""

    name: str
    sumocfg: Path
    simulator = "sumo"

    def sumo_config(self, seed: int) -> Path:
        """The configuration to start for episode seed ``seed`` (file scenarios: always the same)."""
        return self.sumocfg

    def source(self, seed: int) -> Path:
        """The file the simulator loads for episode seed ``seed``."""
        return self.sumo_config(seed)

    def params(self) -> dict:
        """What identifies the scenario in provenance and caches."""
        return {"name": self.name, "sumocfg": str(self.sumocfg)}


@dataclass(frozen=True)
class CityFlowScenario(Scenario):
    """A CityFlow scenario: a roadnet and a flow file (one-second steps, no lane changes, as LibSignal)."""

    name: str = "cityflow"
    sumocfg: Path = Path()
    roadnet: Path = Path()
    flow: Path = Path()
    simulator = "cityflow"

    def __post_init__(self) -> None:
        for path in (self.roadnet, self.flow):
            if not Path(path).is_file():
                raise FileNotFoundError(f"CityFlow scenario {self.name!r}: {path} does not exist")

    def source(self, seed: int) -> Path:
        """CityFlow config for this roadnet and flow (the seed is set on the engine, not here)."""
        cfg = {"interval": 1.0, "seed": 0, "dir": "", "roadnetFile": str(Path(self.roadnet).resolve()),
               "flowFile": str(Path(self.flow).resolve()), "rlTrafficLight": True, "laneChange": False,
               "saveReplay": False, "roadnetLogFile": "", "replayLogFile": ""}
        text = json.dumps(cfg, sort_keys=True)
        path = Path(tempfile.gettempdir()) / "llmtraffic-cityflow" / f"{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
        if not path.exists():
            atomic_write_text(path, text)
        return path

    def params(self) -> dict:
        return {"name": self.name, "simulator": "cityflow", "roadnet": str(self.roadnet), "flow": str(self.flow)}


# Synthetic intersection --------------------------------------------------------------------

APPROACHES = ("N", "E", "S", "W")
"""Arms of the synthetic intersection; link indices follow this order (through, then left)."""
_POSITION = {"N": (0, 1), "E": (1, 0), "S": (0, -1), "W": (-1, 0)}
_THROUGH = {"N": "S", "S": "N", "E": "W", "W": "E"}
_LEFT = {"N": "E", "S": "W", "E": "S", "W": "N"}
"""Arm a vehicle leaves by when it turns left (right-hand traffic: southbound turns east)."""
SYNTHETIC_PHASES = (
    ("NT", "ST"), ("NL", "SL"), ("NT", "NL"), ("ST", "SL"),
    ("ET", "WT"), ("EL", "WL"), ("ET", "EL"), ("WT", "WL"),
)
"""The eight green phases, in the order of OracleTSC Table 9 (NTST, NLSL, NTNL, STSL, ETWT, …)."""


def _default_rates() -> dict[str, float]:
    return {f"{a}{t}": (300.0 if t == "T" else 120.0) for a in APPROACHES for t in "TL"}


@dataclass(frozen=True)
class SyntheticScenario(Scenario):
    """Four arms of ``road_m`` metres, two lanes each (through, left), Poisson demand per movement."""

    name: str = "synthetic"
    sumocfg: Path = Path()
    rates: dict[str, float] = field(default_factory=_default_rates)
    """Mean arrivals per hour per movement, keys like ``"NT"`` (from north, through) or ``"EL"``."""
    profile: tuple[float, ...] = (1.0,)
    """Demand multipliers over equal consecutive blocks of ``duration_s`` (piecewise constant)."""
    duration_s: int = 3600
    """Seconds of generated demand."""
    road_m: float = 300.0
    """Length of every arm (node to junction centre)."""
    speed: float = 11.11
    """Speed limit in m/s (Hangzhou 1x1: 40 km/h)."""
    workdir: Path | None = None
    """Folder for the generated files; default: a folder under the system temp dir keyed by
    the parameters, so equal scenarios share one build."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.rates) - {f"{a}{t}" for a in APPROACHES for t in "TL"})
        if unknown:
            raise ValueError(f"synthetic scenario: unknown movements in rates: {unknown} "
                             "(use N/E/S/W followed by T or L, e.g. 'NT')")
        if any(r < 0 for r in self.rates.values()) or any(m < 0 for m in self.profile) or not self.profile:
            raise ValueError("synthetic scenario: rates and profile must be non-negative (profile non-empty)")
        if self.road_m <= 50 or self.speed <= 0 or self.duration_s <= 0:
            raise ValueError("synthetic scenario: road_m must exceed 50 m; speed and duration_s be positive")
        folder = self.workdir or Path(tempfile.gettempdir()) / "llmtraffic-synthetic" / self._key()
        object.__setattr__(self, "workdir", Path(folder))
        object.__setattr__(self, "sumocfg", Path(folder) / "net.net.xml")

    def params(self) -> dict:
        p = asdict(self)
        p.pop("workdir"), p.pop("sumocfg")
        return p

    def _key(self) -> str:
        blob = json.dumps({k: v for k, v in asdict(self).items() if k not in ("workdir", "sumocfg")},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def sumo_config(self, seed: int) -> Path:
        folder = Path(self.workdir)
        net = folder / "net.net.xml"
        if not net.exists():
            build_network(folder, self.road_m, self.speed)
        routes = folder / f"routes_{seed}.rou.xml"
        if not routes.exists():
            atomic_write_text(routes, routes_xml(self.rates, self.profile, self.duration_s, seed))
        cfg = folder / f"seed_{seed}.sumocfg"
        if not cfg.exists():
            atomic_write_text(cfg, f'<configuration>\n  <input>\n    <net-file value="{net.name}"/>\n'
                        f'    <route-files value="{routes.name}"/>\n  </input>\n'
                        '  <time>\n    <begin value="0"/>\n  </time>\n</configuration>\n')
        return cfg


def netconvert() -> str:
    """Path of SUMO's ``netconvert``, found through the ``sumo`` package (no SUMO_HOME needed)."""
    import sumo

    exe = Path(sumo.SUMO_HOME) / "bin" / "netconvert"
    if not exe.exists():
        raise FileNotFoundError(f"netconvert not found at {exe} (eclipse-sumo package incomplete?)")
    return str(exe)


def network_xml(road_m: float, speed: float) -> dict[str, str]:
    """Plain-XML inputs of netconvert: nodes, edges, connections and the static program.

    Lane 0 (rightmost) of each arm goes straight on, lane 1 turns left; no right turns, as in
    LibSignal's SUMO version of Hangzhou 1x1. Link ``2*k`` is arm ``k``'s through movement and
    ``2*k+1`` its left turn (arms in :data:`APPROACHES` order).
    """
    nodes = ['<node id="C" x="0" y="0" type="traffic_light"/>']
    nodes += [f'<node id="{a}" x="{dx * road_m}" y="{dy * road_m}" type="priority"/>'
              for a, (dx, dy) in _POSITION.items()]
    edges = []
    for a in APPROACHES:
        edges.append(f'<edge id="{a}_in" from="{a}" to="C" numLanes="2" speed="{speed}"/>')
        edges.append(f'<edge id="{a}_out" from="C" to="{a}" numLanes="2" speed="{speed}"/>')
    links = []
    for k, a in enumerate(APPROACHES):
        links.append((2 * k, f"{a}_in", f"{_THROUGH[a]}_out", 0))
        links.append((2 * k + 1, f"{a}_in", f"{_LEFT[a]}_out", 1))
    cons = [f'<connection from="{f}" to="{t}" fromLane="{lane}" toLane="{lane}"/>' for _, f, t, lane in links]
    greens = []
    for served in SYNTHETIC_PHASES:
        idx = {2 * APPROACHES.index(m[0]) + (m[1] == "L") for m in served}
        greens.append("".join("G" if i in idx else "r" for i in range(len(links))))
    tll = ['<tlLogic id="C" type="static" programID="0" offset="0">']
    tll += [f'  <phase duration="30" state="{s}"/>' for s in greens]
    tll.append("</tlLogic>")
    tll += [f'<connection from="{f}" to="{t}" fromLane="{lane}" toLane="{lane}" tl="C" linkIndex="{i}"/>'
            for i, f, t, lane in links]
    return {
        "nod": "<nodes>\n" + "\n".join(nodes) + "\n</nodes>\n",
        "edg": "<edges>\n" + "\n".join(edges) + "\n</edges>\n",
        "con": "<connections>\n" + "\n".join(cons) + "\n</connections>\n",
        "tll": "<tlLogics>\n" + "\n".join(tll) + "\n</tlLogics>\n",
    }


def build_network(folder: Path, road_m: float, speed: float) -> Path:
    """Write the plain XML into ``folder`` and run netconvert; returns the ``.net.xml``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for kind, text in network_xml(road_m, speed).items():
        paths[kind] = folder / f"plain.{kind}.xml"
        atomic_write_text(paths[kind], text)
    net = folder / "net.net.xml"
    tmp = folder / f"net.{os.getpid()}.part.xml"
    cmd = [netconvert(), "--node-files", str(paths["nod"]), "--edge-files", str(paths["edg"]),
           "--connection-files", str(paths["con"]), "--tllogic-files", str(paths["tll"]),
           "--no-turnarounds", "true", "--output-file", str(tmp)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"netconvert failed for {folder}:\n{done.stderr}")
    os.replace(tmp, net)
    return net


def poisson_departures(rng: np.random.Generator, rate_per_h: float, profile: tuple[float, ...],
                       duration_s: int) -> list[float]:
    """Arrival times of a Poisson process whose rate is ``rate_per_h`` times the block's multiplier."""
    block = duration_s / len(profile)
    times: list[float] = []
    for k, mult in enumerate(profile):
        lam = rate_per_h * mult / 3600.0
        if lam <= 0:
            continue
        n = rng.poisson(lam * block)
        # given the count, Poisson arrivals are uniform over the block
        times += sorted((k * block + rng.uniform(0, block, n)).tolist())
    return times


def routes_xml(rates: dict[str, float], profile: tuple[float, ...], duration_s: int, seed: int) -> str:
    """Route file with seeded Poisson departures for every movement (fixed movement order)."""
    rng = np.random.default_rng(seed)
    routes, vehicles = [], []
    for a in APPROACHES:
        for turn, dest in (("T", _THROUGH[a]), ("L", _LEFT[a])):
            move = f"{a}{turn}"
            routes.append(f'  <route id="{move}" edges="{a}_in {dest}_out"/>')
            for t in poisson_departures(rng, rates.get(move, 0.0), profile, duration_s):
                vehicles.append((round(t, 2), move))
    vehicles.sort()
    lines = ["<routes>", *routes]
    lines += [f'  <vehicle id="{m}.{i}" route="{m}" depart="{t:.2f}" departLane="best" departSpeed="max"/>'
              for i, (t, m) in enumerate(vehicles)]
    lines.append("</routes>")
    return "\n".join(lines) + "\n"


# Lookup ----------------------------------------------------------------------------------

def load(name: str | os.PathLike, **params) -> Scenario:
    """``"cologne1"``, ``"hangzhou1x1"`` (CityFlow), ``"hangzhou1x1_sumo"``, ``"synthetic"``
    (keyword parameters of :class:`SyntheticScenario`) or a path to a ``.sumocfg``."""
    if isinstance(name, Scenario):
        return name
    key = str(name)
    if key == "synthetic":
        return SyntheticScenario(**params)
    if params:
        raise TypeError(f"scenario {key!r} takes no parameters, got {sorted(params)}")
    if key in FILES:
        return Scenario(key, data_path(FILES[key]))
    if key in CITYFLOW_FILES:
        roadnet, flow = CITYFLOW_FILES[key]
        return CityFlowScenario(key, roadnet=data_path(roadnet), flow=data_path(flow))
    if key.endswith(".sumocfg"):
        path = Path(key)
        if not path.is_file():
            raise FileNotFoundError(f"scenario file {path} does not exist")
        try:
            ET.parse(path)
        except ET.ParseError as err:
            raise ValueError(f"scenario file {path} is not valid XML: {err}") from None
        return Scenario(path.stem, path.resolve())
    raise ValueError(f"unknown scenario {key!r}; known: {sorted([*FILES, *CITYFLOW_FILES, 'synthetic'])} "
                     "or a path ending in .sumocfg")
