"""client.base.ClientSettings: the one place both clients' constructor arguments are checked and resolved."""
from __future__ import annotations

import asyncio
import inspect

import pytest

from edge_deploy.client.async_client import AsyncLaneDetClient
from edge_deploy.client.base import DETECT_DEFAULTS, ClientSettings, DetectOptions, LaneClientOptions
from edge_deploy.client.sync_client import LaneDetClient
from edge_deploy.errors import ClientError


def test_arguments_are_resolved_once() -> None:
    settings = ClientSettings.of("127.0.0.1:8001", "m", version=3, client_timeout=2, top_k=4)
    assert (settings.transport, settings.version, settings.client_timeout) == ("shm", "3", 2.0)
    assert settings.overrides == (None, None, 4)
    assert ClientSettings.of("10.0.0.5:8001").transport == "grpc"


@pytest.mark.parametrize("kwargs, words", [
    ({"transport": "udp"}, "unknown transport 'udp'"),
    ({"url": "10.0.0.5:8001", "transport": "shm"}, "needs the server on this host"),
    ({"tls": "ca.pem"}, "tls must be a TLSConfig"),
    ({"top_k": 0}, "top_k"),
    ({"conf_threshold": 1.5}, "conf_threshold"),
    ({"track": True}, "track=True follows lane markers"),
])
def test_both_clients_refuse_the_same_arguments_in_one_line(kwargs, words) -> None:
    for make in (lambda: LaneDetClient(**kwargs, connect=False), lambda: AsyncLaneDetClient(**kwargs),
                 lambda: ClientSettings.of(**kwargs)):
        with pytest.raises(ClientError, match=words) as info:
            make()
        assert "\n" not in str(info.value)


def test_both_clients_keep_the_settings_they_were_given() -> None:
    sync = LaneDetClient("127.0.0.1:1", "m", transport="grpc", top_k=2, connect=False)
    sync.close()

    async def make() -> AsyncLaneDetClient:
        return AsyncLaneDetClient("127.0.0.1:1", "m", transport="grpc", top_k=2)

    async_client = asyncio.run(make())
    assert sync.settings == async_client.settings
    assert (sync.model_name, sync.transport, sync._overrides) == ("m", "grpc", (None, None, 2))


def test_the_constructors_take_the_settings_arguments_with_the_same_defaults() -> None:
    """Both constructors pass LaneClientOptions on to ClientSettings.of, which holds the defaults: the options name
    every keyword it takes (plant: drop `fps` from LaneClientOptions and this fails), and the signatures help() and
    editors show spell each one out with its default (plant: drop @spelled_out from LaneDetClient.__init__)."""
    shared = inspect.signature(ClientSettings.of).parameters
    keywords = {name: p.default for name, p in shared.items() if p.kind == p.KEYWORD_ONLY}
    assert set(LaneClientOptions.__annotations__) == set(keywords)
    for client in (LaneDetClient, AsyncLaneDetClient):
        params = inspect.signature(client).parameters
        assert {name: params[name].default for name in ("url", "model")} == {name: shared[name].default
                                                                             for name in ("url", "model")}
        assert {name: params[name].default for name in keywords if name in params} == keywords, client
        assert params["connect"].default is True and all(p.kind != p.VAR_KEYWORD for p in params.values())
        for method in (client.detect, client.detect_batch, client.detect_markers):
            params = inspect.signature(method).parameters
            assert {name: params[name].default for name in DetectOptions.__annotations__ if name in params} == \
                DETECT_DEFAULTS, method
            assert params["deadline"].default is None


def test_both_clients_refuse_a_detect_keyword_they_do_not_know() -> None:
    """detect's options are one TypedDict for both clients, checked at run time as Python checks a keyword (plant:
    make `unknown` empty in base.detect_call, and a misspelt color= is silently BGR)."""
    import numpy as np

    frame = np.zeros((8, 8, 3), np.uint8)
    sync = LaneDetClient("127.0.0.1:1", "m", transport="grpc", connect=False)
    sync.close()
    for call in (lambda: sync.detect(frame, colour="rgb"), lambda: sync.detect_batch([frame], top=3)):
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            call()

    async def run() -> None:
        client = AsyncLaneDetClient("127.0.0.1:1", "m", transport="grpc")
        with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
            await client.detect(frame, colour="rgb")

    asyncio.run(run())


def test_fps_makes_detect_markers_a_stream_and_is_checked() -> None:
    import numpy as np

    from edge_deploy.geometry import Camera, Mounting

    camera = Camera(640, 360, np.array([[500.0, 0, 320], [0, 500.0, 180], [0, 0, 1]]), np.zeros(5), Mounting(1.5, 2.0))
    client = LaneDetClient("127.0.0.1:1", "m", transport="grpc", camera=camera, fps=25, connect=False)
    client.close()
    assert client.geometry.fps == 25.0 and LaneDetClient("127.0.0.1:1", "m", transport="grpc", camera=camera,
                                                         connect=False).geometry.fps is None
    for kwargs in ({"fps": 30.0}, {"fps": 0, "camera": camera}, {"fps": float("inf"), "camera": camera}):
        with pytest.raises(ClientError, match=r"fps=.*: give the frames per second \(more than 0\)"):
            ClientSettings.of(**kwargs)
