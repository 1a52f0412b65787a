"""The page at / in a real headless browser (Debian's chromium, driven by playwright):
type text, click Speak, and the audio streams in and plays, with its TTFA shown.

CI needs the Debian package `chromium` (apt-get install -y chromium); the test skips
without it. playwright's own browser downloads are never used."""

from __future__ import annotations

import os

import pytest
from server_harness import SAMPLE_RATE, Server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--autoplay-policy=no-user-gesture-required"]

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"{CHROMIUM} is missing: apt-get install -y chromium")


def test_page_streams_and_plays_audio(server: Server) -> None:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(server.url + "/")
            page.wait_for_selector("#voice option[value='default']", state="attached")
            page.fill("#text", "Hello there. This page streams audio while it is made.")
            page.click("#speak")
            page.wait_for_selector("#stats[data-state='played']", state="attached",
                                   timeout=60_000)
            stats = page.eval_on_selector("#stats", "element => ({...element.dataset})")
            status = page.text_content("#status")
            ttfa_text = page.text_content("#ttfa")
        finally:
            browser.close()
    assert not errors, errors
    assert status == "played"
    assert 0 < float(stats["ttfaMs"]) < 10_000 and ttfa_text.endswith(" ms")
    assert int(stats["sampleRate"]) == SAMPLE_RATE
    seconds = int(stats["samples"]) / SAMPLE_RATE
    assert seconds > 0.5
    # Web Audio played it all: its clock ran through the whole received audio (and through
    # any gap where a chunk came late).
    assert float(stats["playedSeconds"]) >= seconds - 0.05
