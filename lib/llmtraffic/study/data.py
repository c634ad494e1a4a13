"""`make data`: download the public data sets, verify checksums, place them in the data directory.

The layout matches the copies CI reads (``../shared/data``): ``libsignal/<scenario>/…`` from
LibSignal, ``busholding/pkl/…`` (data) and ``busholding/authors_code/…`` (their simulator and
loop code, for the cross-check) from the bus-holding authors' repository, all pinned to a
commit so a checksum can only fail if a download is corrupted or the source was rewritten.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from ..paths import DATA_ENV, data_dir, is_under
from .atomic import atomic_write_bytes

LIBSIGNAL = (
    "https://raw.githubusercontent.com/DaRL-LibSignal/LibSignal/"
    "127af9f93902778e556de2eedb2b606c4c9447e6/data/raw_data/"
)
BUSHOLDING = (
    "https://raw.githubusercontent.com/JiajieTSC/LLM-enhanced-RL-for-generic-bus-holding-control/"
    "3166e956f08123508bd2827988fe29a68520780b/real_world/"
)

AUTHORS_CODE = (
    "https://raw.githubusercontent.com/JiajieTSC/LLM-enhanced-RL-for-generic-bus-holding-control/"
    "87acaa6106116bad5c5b7e664376d78f3b619527/"
)
"""The bus authors' simulator and loop code (every .py and .ini of ``synthetic_network/`` and
``real_world/``): run unmodified, from the data directory, by the ``bus_crosscheck`` notebook;
never copied into the project's source (the repository has no licence file)."""

MIRROR_ENV = "LLMTRAFFIC_DATA_URL"
"""A mirror to fetch from instead of the public sources (see :func:`mirror_url`)."""
CONNECT_TIMEOUT_S = 10.0

# (path in the data directory, sha256). Source URL follows from the path prefix (see `source_url`).
FILES: tuple[tuple[str, str], ...] = (
    ("busholding/authors_code/real_world/analyzer.py", "91b1d6e671446d8251da316493b01c0ae415bb6c6f9056c8e82f0ca84669e0e5"),
    ("busholding/authors_code/real_world/analyzer_API.py", "be47e16302708bca7e2bcde13915328722b233f348d4054a46a71c9bb9be5764"),
    ("busholding/authors_code/real_world/bus_update.py", "87c92eed3aa96232eca79f3f40ebe0a44bff751d7bb53f88fef94f676b7cb729"),
    ("busholding/authors_code/real_world/memory.py", "933806b474a25095b3fdb8d20a1b0eeb3778889073b44541988a291ec9c11c92"),
    ("busholding/authors_code/real_world/model.py", "ddcd277eab1e0e4f78051420da93a4bc4c86ef94af6ae6abcab8f684dae74843"),
    ("busholding/authors_code/real_world/reward_exploration.py", "2c2525a0e4f617621a0f1d977f9a415987d2798a973a8aa195492996a0ef75fe"),
    ("busholding/authors_code/real_world/reward_exploration_API.py", "c13f7a673df0cfe7053096522b8ad56a594e9ce0eae7b80545cf808e7bba2ff8"),
    ("busholding/authors_code/real_world/reward_initial.py", "e348995252d0eda95ef412cdeffca8d30d2796d293cdaacdb88ddae3e37a35b4"),
    ("busholding/authors_code/real_world/reward_initial_API.py", "6b1ad69dbb57b717e0c5a7d92969d0e3a65371adc779fabb4fd78f63aafccfdb"),
    ("busholding/authors_code/real_world/reward_modify.py", "3c5e025de9fc7a7258e8b2387a205a1b9cc2e79dfe78dbf5c99ad340732b0950"),
    ("busholding/authors_code/real_world/reward_modify_API.py", "9bb6ac0e154e285c7eaa327a34c4f93646902808afb7c77aacea602556635add"),
    ("busholding/authors_code/real_world/run_all.py", "018cfbeecc6d54fc332166c23353a8d1874481f43bc648496c3d186db5014722"),
    ("busholding/authors_code/real_world/testing_main.py", "9f9e736107010b6d4c057009f2bba884d264b6eaa50e08369c45154038069116"),
    ("busholding/authors_code/real_world/testing_settings.ini", "6ac956790acd99f8207c625725cd64962018c702d9665681b9c776c08100f373"),
    ("busholding/authors_code/real_world/testing_simulation.py", "79c11593ddeeb855d36635c42a786421eb4095386e646998e045b83df3a12b4c"),
    ("busholding/authors_code/real_world/training_main.py", "3c54c7ef129ef68cb310e2c59e47e5db2f1dd71f579e81abe9d9623ccc6904ca"),
    ("busholding/authors_code/real_world/training_settings.ini", "890210618cc3de94b71926bc1c9540b75b79c2b8ae6f81c766c3c80a96017e2d"),
    ("busholding/authors_code/real_world/training_simulation.py", "bf4220784c05a3e63b388abe745e7637e99aa8cbdca8c9f47ec518c913bc941b"),
    ("busholding/authors_code/real_world/trajectories_for_LLM_generation.py", "231df0dd4e71cc0878b99549d0998d4aa02d2ab033bf22859c9966f0361762e7"),
    ("busholding/authors_code/real_world/utils.py", "7e94ccfbbb929d7338df762cbeae20e42dea5a638ccdb1e53bd39270ed756820"),
    ("busholding/authors_code/real_world/visualization.py", "6801221231de287e0ec58d349c61b78dc55c71b4ad7aa78a06daeb0eb700607a"),
    ("busholding/authors_code/synthetic_network/analyzer.py", "74c0098fb312856a465922cd3afcf3e2d1d33733b994b686e0247f885c26227d"),
    ("busholding/authors_code/synthetic_network/analyzer_API.py", "3cc8ae4ef82839422c5fd9a00e50987c1924d9ed92849ced3fa3b4d007c3b615"),
    ("busholding/authors_code/synthetic_network/memory.py", "933806b474a25095b3fdb8d20a1b0eeb3778889073b44541988a291ec9c11c92"),
    ("busholding/authors_code/synthetic_network/model.py", "ddcd277eab1e0e4f78051420da93a4bc4c86ef94af6ae6abcab8f684dae74843"),
    ("busholding/authors_code/synthetic_network/reward_exploration.py", "e610d81aa8833bdc3fc2de4ecfba869afa6e4df3647306c0ab32eec351a1716e"),
    ("busholding/authors_code/synthetic_network/reward_exploration_API.py", "a6e413ae92c7b226f9468e73b83b0e2863888dfe5735a0fe94591d155c69ea45"),
    ("busholding/authors_code/synthetic_network/reward_initial.py", "20d080f7a711614d9eb1cce4a2a8810d3cbe5e6735d399fb2513db11c8fa04b5"),
    ("busholding/authors_code/synthetic_network/reward_initial_API.py", "44e1ad87327862f279bc68e258d4198851113e18ce84ec6fa7543574456f1fab"),
    ("busholding/authors_code/synthetic_network/reward_modify.py", "1d0082d1914474f2a39c19b6dd83cf05ed54f9c8eca530a5a0d902a65eb5fcfc"),
    ("busholding/authors_code/synthetic_network/reward_modify_API.py", "e599a8ba5de2b7b5c15f6a52d7488c5ed87ed547fa176054fc7409585ed7b14b"),
    ("busholding/authors_code/synthetic_network/run_all.py", "f14fd9a708cba18ad78bac7447f2a89780e38fe77f45a71d4d7f3486330e4fe4"),
    ("busholding/authors_code/synthetic_network/testing_main.py", "10c7efa2b0af3ccdc77438ec47f43d441b0bc6208e67688700fd1a44822fbeec"),
    ("busholding/authors_code/synthetic_network/testing_settings.ini", "bdba4a69aaf9ad1cf29635ca56706d3afc1c0303ef2e9475efd15daafc9dd083"),
    ("busholding/authors_code/synthetic_network/testing_simulation.py", "77c1c578737154288bfbacdf3c6cc4a65e9f0c1adec80700ba0535076603c594"),
    ("busholding/authors_code/synthetic_network/training_main.py", "b45d8408dc56f8179f371098f3289f4f6141b08556e14dca5542867ec2b68444"),
    ("busholding/authors_code/synthetic_network/training_settings.ini", "565b819ea6eea4e318858fff3203a01a00226fa52fa82ea0e271fc2b081ddd76"),
    ("busholding/authors_code/synthetic_network/training_simulation.py", "d256f634983d1977f32d54fdc23e816e521bca0d1eb1591e9d716ffd27d22985"),
    ("busholding/authors_code/synthetic_network/trajectories_for_LLM_generation.py", "e368a8162a7d523a55da0825a592c976040666476cf8c14e74ad41a25c10c693"),
    ("busholding/authors_code/synthetic_network/utils.py", "7e94ccfbbb929d7338df762cbeae20e42dea5a638ccdb1e53bd39270ed756820"),
    ("busholding/authors_code/synthetic_network/visualization.py", "6801221231de287e0ec58d349c61b78dc55c71b4ad7aa78a06daeb0eb700607a"),
    ("busholding/pkl/data_case2/board_bystop_per_hour_3436.pkl", "6ee4ae8f16718b78ae01bd8ab3bd8a6d076b626794eb26b85f933549080797e7"),
    ("busholding/pkl/data_case2/board_bystop_per_hour_3986.pkl", "27ff9e163035a75962dfd6fb5f43f16e665c15579092863a6391113d20f5413a"),
    ("busholding/pkl/data_case2/destination_percent_3436.pkl", "1a0ea3f3b0054a100c805883721bd47dd07122b45e7ef4735a084c7bc55bcf4d"),
    ("busholding/pkl/data_case2/destination_percent_3986.pkl", "c4fc1d368dd636e9693e4af7d16f60bddb6432e7c37f074feda02c5086b1b66c"),
    ("busholding/pkl/data_case2/mid_travel_time_3436.pkl", "ed2158ce1ef9082f9999001dac349883138a3beffe0c6a80a56a8366ea3eff89"),
    ("busholding/pkl/data_case2/mid_travel_time_3986.pkl", "618ab802151de14234420325897c4e4b4f7f5db41bfeb4345e526b550d58320c"),
    ("busholding/pkl/data_case2/passenger_info_bystop_3436.pkl", "52a76d18f799c2b02b28dbcafd65b6b6e7695d16befc81db22ea76cb8d29fac2"),
    ("busholding/pkl/data_case2/passenger_info_bystop_3986.pkl", "8772145d8444fcd51753c91897988d6283df914f4802da1bd5a693acca776a82"),
    ("busholding/pkl/data_case2/stops_position_direct_distance_3436_1.pkl", "e5543505ccdea3235944a348153bb1b3637c7ec9c2e91b68e4ec830beb4ab5c4"),
    ("busholding/pkl/data_case2/stops_position_direct_distance_3986_1.pkl", "89cdb21f3452bb51111b43f39057c1906f5fa991f210792da4dc5e81bff6afe8"),
    ("busholding/pkl/data_case3/data_line_103/board_bystop_per_hour_103.pkl", "bd16676abe9fb37918382d2094def62550d5975cdec18bcb6e5fdb04e0420ec8"),
    ("busholding/pkl/data_case3/data_line_103/destination_percent_103.pkl", "baef597bb12ff1ddeeaefbdc9aad4f54609cc2720cfb415fdaf51f5c4353875d"),
    ("busholding/pkl/data_case3/data_line_103/mid_travel_time_103.pkl", "28c3f942b627a3ec9f36c3bbfa79c4bcb5ef3a097b8d28dd90fc9232a8feebe3"),
    ("busholding/pkl/data_case3/data_line_103/new_line_103_stops_info.pkl", "dfefc7e1e26a1948429885664b0d05c0bdfd3e90cee9d5ee71829f271fe219bc"),
    ("busholding/pkl/data_case3/data_line_103/passenger_info_bystop_103.pkl", "417b442f06ce991a24d181e130e4d8193e03846e41351f949530bc0d48544ae7"),
    ("busholding/pkl/data_case3/data_line_103/stops_position_direct_distance_103_0.pkl", "78d77ebddc125450dd274c2af16a564af1db95450ed794087aaa7b6c49dc8cc0"),
    ("busholding/pkl/data_case3/data_line_111/board_bystop_per_hour_111.pkl", "f97044d6ac48ab6d87532cfe823091ee736cd08082951934722914c59b900c6b"),
    ("busholding/pkl/data_case3/data_line_111/destination_percent_111.pkl", "fa0573515615a070228a7f98bc124b38dcb32ac7fb4bf1aa2df969673c5cfcbd"),
    ("busholding/pkl/data_case3/data_line_111/mid_travel_time_111.pkl", "77193df651658ae7e42193df1acbf66dc1d28ae2a3473e59ffaca6b52cc68395"),
    ("busholding/pkl/data_case3/data_line_111/new_line_111_stops_info.pkl", "b97b13e3114392eaf482c3ed9a291f285ebff40b7acfec9d4d8d1dca054f034f"),
    ("busholding/pkl/data_case3/data_line_111/passenger_info_bystop_111.pkl", "d6599b8c844eba8eb9c2388d80a4cfdf8b791f3e828e07a1069ac89a3131ed5c"),
    ("busholding/pkl/data_case3/data_line_111/stops_position_direct_distance_111_0.pkl", "a19ce077620bd0946b66999481e6a1dd693bfc0aa4a965e7a12e5a71c0f3933e"),
    ("busholding/pkl/data_case3/data_line_14/board_bystop_per_hour_14.pkl", "274e3d0ce3de9fe22bb014487df70e15afc133e191008157316d687804ecd9a2"),
    ("busholding/pkl/data_case3/data_line_14/destination_percent_14.pkl", "afaaeb92410a891dd78b37b64feb15db4870340dc67302da12bc6df3f591a0f4"),
    ("busholding/pkl/data_case3/data_line_14/mid_travel_time_14.pkl", "5a7a8354105d0d1e817bbc2bcfabef1d41af16527de234628c6f6a96c5b0a04d"),
    ("busholding/pkl/data_case3/data_line_14/new_line_14_stops_info.pkl", "6d25effc0759aa4472fbd9bc93afecce57d82f3ab1c7fa9cef1c2f4b05914292"),
    ("busholding/pkl/data_case3/data_line_14/passenger_info_bystop_14.pkl", "2aa0548a6225e39b0d9a7cce2ac31182f76fb4cca05316ca0d08daa6feda26c6"),
    ("busholding/pkl/data_case3/data_line_14/stops_position_direct_distance_14_0.pkl", "dc9cdb994b54153961932838b857ae34895f5f73710d8c84ad16ac619be34f8c"),
    ("busholding/pkl/data_case3/data_line_38/board_bystop_per_hour_38.pkl", "654a7836bd06d1f100639fb015c81f2c41e98188dc15a18370624857d44ae55e"),
    ("busholding/pkl/data_case3/data_line_38/destination_percent_38.pkl", "a6db8d78664793b2abd161c79bca1e4da84fe9a3557ef4bca2ee1eedf8e6f5ed"),
    ("busholding/pkl/data_case3/data_line_38/mid_travel_time_38.pkl", "fa318179ec1a863807976950dfbdb802aef7cdec13d1df7c71770ced449e3a4e"),
    ("busholding/pkl/data_case3/data_line_38/new_line_38_stops_info.pkl", "29b689c564298247a9f802862fa2d7f6aae05b2006b32ef6474996e94891fb6f"),
    ("busholding/pkl/data_case3/data_line_38/passenger_info_bystop_38.pkl", "bb988347cbada77fb81c25cdb166691d1b9bbc378c9e86db3a1b382fd077e289"),
    ("busholding/pkl/data_case3/data_line_38/stops_position_direct_distance_38_0.pkl", "4af43e61c4d8dbbc4c5607b6d293cfcbcdad06e97e8860c911b3fdb8686d6c41"),
    ("busholding/pkl/data_case3/data_line_55/board_bystop_per_hour_55.pkl", "6019fc4c802695699358b4d4f7d430de3915a5e5b91ad8bd7c1c2d0340e29693"),
    ("busholding/pkl/data_case3/data_line_55/destination_percent_55.pkl", "6b9ef933ca0f1594ebd2fe01bf5b7327b7872a61a08d85a9c5c5ea3c490f6fca"),
    ("busholding/pkl/data_case3/data_line_55/mid_travel_time_55.pkl", "ce9b029690ec1445c97833fd9b9adca946351a32f9b723f83556b937bf796c22"),
    ("busholding/pkl/data_case3/data_line_55/new_line_55_stops_info.pkl", "7afee46a32586db9cd2cbb652d0e858db20fad60b9e6cf734a34a55b93649140"),
    ("busholding/pkl/data_case3/data_line_55/passenger_info_bystop_55.pkl", "07f5c7c8ec9086727ab8feaf3cc4311808f766aeeb1e7f31dd11d18b40b4a45a"),
    ("busholding/pkl/data_case3/data_line_55/stops_position_direct_distance_55_0.pkl", "4a2680dbf6f013783c0af6a8e2fa3c5564be89601248ffc7d053f11334227c6d"),
    ("busholding/pkl/data_case3/data_line_68/board_bystop_per_hour_68.pkl", "cfa4b8aaf5854829e2d10437a402c9ec12ee390d347a7db5fa31f9be416884bc"),
    ("busholding/pkl/data_case3/data_line_68/destination_percent_68.pkl", "36d33ca2ea8f11f5c87249661c4728decae7b09d0d3793a476677c360b892b82"),
    ("busholding/pkl/data_case3/data_line_68/mid_travel_time_68.pkl", "6aa4831436772cb2ed26838190f8f4ff2754ef811551755ef0e732ba0f103a58"),
    ("busholding/pkl/data_case3/data_line_68/new_line_68_stops_info.pkl", "1263b1d6111b303f3b807158cb73c8006bb4f5686d8e4431e499200e0acb4cf0"),
    ("busholding/pkl/data_case3/data_line_68/passenger_info_bystop_68.pkl", "9ef535e6782d3fe0cd54cc1798729855c4eb0329a7e5ba6c2cce5743f082c4af"),
    ("busholding/pkl/data_case3/data_line_68/stops_position_direct_distance_68_0.pkl", "1f410de313ecd8a69e769d86ab4c004805ca34fc77eca8fb321fa0afc410c936"),
    ("libsignal/cologne1/Creative Commons Legal Code.pdf", "b4258d0f79b10879d088a603f6559583f5a18c37adec82f7602bef48959e7199"),
    ("libsignal/cologne1/cologne1.net.xml", "f475b703c7e2e9f39fb2bc7f04fee014b09a09794cb1e40512975f32b7a5b39b"),
    ("libsignal/cologne1/cologne1.rou.xml", "0a5a3fbe2db7018317ea197689f66af4fc6c8fba3b94dbec0f625c2258c03796"),
    ("libsignal/cologne1/cologne1.sumocfg", "40b05f5f5331b6127a54beddeb4fa8e986b3f36be29663ed4c9526334a7e541f"),
    ("libsignal/cologne1/cologne1_flow.json", "b1506e804d12cf7a4db0efb9c36f706c2834c53edc29723806349466776f7423"),
    ("libsignal/cologne1/cologne1_or.sumocfg", "7c7d811273a71d29a5476a445cf346ead12fc6dbe111ce346226277b3cf65723"),
    ("libsignal/cologne1/cologne1_roadnet_red.json", "9a1d0efbe755cbc13d2f2ee1598e9f3b7a3f2fe2e075d8f078a04bc25f016c73"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/flow.json", "3894236e5b8bacea47938fe2ca0e4c6a905e1f23e147c4f1a5e89f1ab8be1c08"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/hangzhou_1x1_bc-tyc_18041610_1h.con.xml", "760243706b1ae0498d6f7b0f39c93c20cada4025f7dd45c14a284f75cb65f3d4"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/hangzhou_1x1_bc-tyc_18041610_1h.edg.xml", "348e13f6e8396dd8981093f8a398178923653e9e24975fd748f09e4c6eef973b"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/hangzhou_1x1_bc-tyc_18041610_1h.net.xml", "679acffab386f0fa87aa40ae904f0744e31c1db1be964f381cbacc5a350b3d9f"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/hangzhou_1x1_bc-tyc_18041610_1h.nod.xml", "d16bbc4d2148b452266abcd02312113fa845849394ec5ef36f7d9e7d35ebd44e"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/hangzhou_1x1_bc-tyc_18041610_1h.rou.xml", "2c6e127f157f3302553fdc7e972228b14064146b8c34f7463b24c6653b967276"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/hangzhou_1x1_bc-tyc_18041610_1h.sumocfg", "0b3aa00b5f9dc57c9008d89b7abd139f5ae04c920f0d32ca80372db2cfd19cd0"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/hangzhou_1x1_bc-tyc_18041610_1h.tll.xml", "e8c0a015d91415c2f67f79bacc42ffc6f3fa7e3619ba65b7d41214bac3fd7c38"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/roadnet.json", "6edf9fa0b570ba97a4d2993bc42615d71cc90c07f49766039b003673225be30f"),
    ("libsignal/hangzhou_1x1_bc-tyc_18041610_1h/signal_plan_template.txt", "1b0aa65adf80945f51d7d49a651945a54e9ddaac040c4c72787943e0595ee674"),
)


@dataclass(frozen=True)
class DataFile:
    path: str
    sha256: str

    @property
    def url(self) -> str:
        return source_url(self.path)


def source_url(path: str) -> str:
    """Public source of a data-directory path (pinned commit)."""
    if path.startswith("libsignal/"):
        rest = path.removeprefix("libsignal/")
        return LIBSIGNAL + urllib.parse.quote(rest)
    if path.startswith("busholding/authors_code/"):
        return AUTHORS_CODE + urllib.parse.quote(path.removeprefix("busholding/authors_code/"))
    if path.startswith("busholding/pkl/"):
        return BUSHOLDING + urllib.parse.quote(path.removeprefix("busholding/pkl/"))
    raise ValueError(f"no public source known for data path {path!r}")


def manifest() -> list[DataFile]:
    return [DataFile(p, h) for p, h in FILES]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class FetchError(RuntimeError):
    """One file could not be fetched (an HTTP error status); the other files are still tried."""


class SourceUnreachable(FetchError):
    """The source accepts no connection: the remaining files are not tried (one message, not one per file)."""


def mirror_url(f: DataFile) -> str:
    """Where ``f`` is fetched from: ``$LLMTRAFFIC_DATA_URL`` + its path when that is set (a mirror laid
    out like the data directory, e.g. another machine's served by ``python -m http.server``), else
    its pinned public source."""
    mirror = os.environ.get(MIRROR_ENV)
    return f"{mirror.rstrip('/')}/{urllib.parse.quote(f.path)}" if mirror else f.url


def _http_get(url: str) -> bytes:
    import httpx

    try:
        response = httpx.get(url, follow_redirects=True, timeout=httpx.Timeout(60.0, connect=CONNECT_TIMEOUT_S))
    except httpx.TransportError as err:
        raise SourceUnreachable(f"{type(err).__name__}: {err}") from err
    if response.is_error:
        raise FetchError(f"HTTP {response.status_code} from {url}")
    return response.content


@dataclass
class Report:
    """What :func:`ensure` found and did in the data directory ``dest``."""

    dest: Path
    verified: list[str] = field(default_factory=list)
    """Already present with the manifest's checksum (not fetched again)."""
    fetched: list[str] = field(default_factory=list)
    fetched_bytes: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    """Path → why it is still missing (an HTTP error, a download whose checksum differs)."""
    unreachable: str = ""
    """The connection error that stopped fetching ('' if the source answered)."""
    untried: list[str] = field(default_factory=list)
    """Files not tried once the source was unreachable."""

    @property
    def missing(self) -> list[str]:
        return sorted([*self.failed, *self.untried])

    def summary(self) -> str:
        """One line: what was fetched and what was already there."""
        if not self.fetched:
            return f"data: all {len(self.verified)} files present and verified in {self.dest}"
        return (f"data: fetched {len(self.fetched)} files ({self.fetched_bytes / 1e6:.1f} MB) into {self.dest}, "
                f"sha256 verified; {len(self.verified)} were already present and verified")

    def problem(self) -> str:
        """The one message for missing files: which, why, and both remedies."""
        why = f"the source is unreachable ({self.unreachable})" if self.unreachable else "they could not be fetched"
        lines = [f"data: {len(self.missing)} files are missing from the data directory {self.dest} and {why}:"]
        by_folder: dict[str, list[str]] = {}
        for path in self.missing:
            folder, _, name = path.rpartition("/")
            by_folder.setdefault(folder, []).append(name)
        lines += [f"  {folder}/: {', '.join(names)}" for folder, names in by_folder.items()]
        lines += [f"  {path}: {why_one}" for path, why_one in sorted(self.failed.items())]
        lines.append("Either connect this machine to the network and run `make data` (or this command again), "
                     f"or set {DATA_ENV} to a directory that already holds these files (e.g. a copy of another "
                     "machine's data directory).")
        return "\n".join(lines)


def ensure(
    files: Iterable[DataFile] | None = None,
    dest: Path | None = None,
    get: Callable[[str], bytes] = _http_get,
    url_of: Callable[[DataFile], str] = mirror_url,
    progress: bool = True,
) -> Report:
    """Fetch every missing or corrupted file of ``files`` (default: the manifest) into ``dest``
    (default: the data directory); the step of ``make data``, ``make study`` and ``make test``.

    A file already present with the manifest's sha256 is kept without a download. A download
    whose checksum differs is not written (nothing is ever half-written). When the source
    accepts no connection, the remaining files are not tried. Never raises for a file that
    cannot be fetched: the :class:`Report` lists it.
    """
    report = Report(Path(dest or data_dir()))
    todo = []
    for f in files if files is not None else manifest():
        target = report.dest / f.path
        if target.is_file() and sha256(target) == f.sha256:
            report.verified.append(f.path)
        else:
            todo.append(f)
    bar = tqdm(todo, desc="data", unit="file", leave=False, disable=not progress or not todo)
    for i, f in enumerate(bar):
        url = url_of(f)
        try:
            content = get(url)
        except SourceUnreachable as err:
            report.unreachable = f"{url}: {err}"
            report.untried = [g.path for g in todo[i:]]
            break
        except FetchError as err:
            report.failed[f.path] = str(err)
            continue
        got = hashlib.sha256(content).hexdigest()
        if got != f.sha256:
            report.failed[f.path] = f"the download's sha256 {got} differs from the manifest's {f.sha256} (source {url})"
            continue
        atomic_write_bytes(report.dest / f.path, content)
        report.fetched.append(f.path)
        report.fetched_bytes += len(content)
    bar.close()
    return report


def files_under(prefixes: Iterable[str]) -> list[DataFile]:
    """The manifest's files inside any of ``prefixes`` (folders of the data directory, or files)."""
    prefixes = tuple(prefixes)
    return [f for f in manifest() if any(is_under(f.path, p) for p in prefixes)]


@dataclass(frozen=True)
class Need:
    """A data folder a notebook declares, needed always or only ``when`` a parameter takes one of those values."""

    folder: str
    when: tuple[str, ...] = ()


def notebook_needs(notebook: Path) -> tuple[Need, ...]:
    """The data a notebook declares in its metadata ``llmtraffic.data``: a list whose entries are a
    folder of the data directory (always needed) or ``{"folder": F, "when": [value, ...]}`` (needed
    when any parameter, nested ones included, holds one of the values, e.g. a scenario name).

    The runner fetches what the parameters need (:func:`folders_for`) before the notebook starts
    and, while it runs, :func:`llmtraffic.paths.data_path` refuses any other data file, so a
    declaration that misses a file fails the smoke run instead of guessing. A notebook without
    the key needs no data. Raises :class:`ValueError` for a malformed declaration."""
    import nbformat

    entries = nbformat.read(str(notebook), as_version=4).metadata.get("llmtraffic", {}).get("data", [])
    example = '["busholding/pkl/data_case2", {"folder": "libsignal/cologne1", "when": ["cologne1"]}]'
    if not isinstance(entries, list):
        raise ValueError(f"{notebook.name}: metadata llmtraffic.data must be a list such as {example}, got {entries!r}")
    needs = []
    for entry in entries:
        if isinstance(entry, str):
            entry = {"folder": entry}
        when = entry.get("when", []) if isinstance(entry, dict) else None
        if (not isinstance(entry, dict) or set(entry) - {"folder", "when"} or not isinstance(entry.get("folder"), str)
                or not isinstance(when, list) or not all(isinstance(v, str) for v in when)):
            raise ValueError(f"{notebook.name}: metadata llmtraffic.data entry {entry!r} is not a folder or "
                             f"{{folder, when: [values]}} (e.g. {example})")
        if not files_under([entry["folder"]]):
            raise ValueError(f"{notebook.name}: metadata llmtraffic.data names {entry['folder']!r}, which holds no "
                             "file of the data manifest (llmtraffic.study.data.FILES)")
        needs.append(Need(entry["folder"], tuple(when)))
    return tuple(needs)


def _strings(value: object) -> Iterator[str]:
    """Every string inside ``value`` (mapping keys and values, list items, nested)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def folders_for(needs: Iterable[Need], params: dict) -> tuple[str, ...]:
    """The declared folders that a notebook run with ``params`` (every value, defaults included) needs."""
    held = set(_strings(params))
    return tuple(dict.fromkeys(n.folder for n in needs if not n.when or held & set(n.when)))


def check(dest: Path | None = None) -> list[str]:
    """Problems with the data directory: missing files and checksum mismatches (empty if fine)."""
    dest = Path(dest or data_dir())
    problems = []
    for f in manifest():
        target = dest / f.path
        if not target.exists():
            problems.append(f"missing: {f.path}")
        elif sha256(target) != f.sha256:
            problems.append(f"checksum differs: {f.path}")
    return problems
