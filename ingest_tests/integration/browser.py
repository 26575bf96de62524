"""Headless Chromium (Debian's `chromium` and its matching `chromium-driver`) through Selenium.

No browser or driver downloads: Selenium is pointed at the Debian binaries, which bin/setup installs."""

from __future__ import annotations

import shutil
import time
from contextlib import contextmanager


class Browser:
    def __init__(self, driver):
        self.driver = driver

    def __getattr__(self, name):
        return getattr(self.driver, name)

    def wait_for(self, predicate, what: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                found = predicate()
            except Exception:  # the page is still rendering: elements come and go
                found = None
            if found:
                return found
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; page text: "
                             f"{self.driver.find_element('tag name', 'body').text[:2000]!r}")

    def wait_text(self, text: str, timeout: float = 60):
        return self.wait_for(lambda: text in self.driver.find_element("tag name", "body").text,
                             f"{text!r} on the page", timeout)

    def button(self, label: str, timeout: float = 60):
        """The first visible, enabled button whose text is `label`."""
        def find():
            for b in self.driver.find_elements("tag name", "button"):
                if b.text.strip() == label and b.is_displayed() and b.is_enabled():
                    return b
            return None
        return self.wait_for(find, f"a button {label!r}", timeout)

    def click(self, element) -> None:
        """Click, or when another element of the same widget lies on top (Blueprint's menus do), a real mouse
        click at the element's place, which that widget receives as a user's click."""
        from selenium.common.exceptions import ElementClickInterceptedException
        from selenium.webdriver.common.action_chains import ActionChains

        try:
            element.click()
        except ElementClickInterceptedException:
            ActionChains(self.driver).move_to_element(element).click().perform()

    def dismiss(self, label: str, timeout: float = 5) -> None:
        """Click the button `label` if it shows up (a first-visit pop-up, say)."""
        try:
            self.button(label, timeout).click()
        except AssertionError:
            pass


@contextmanager
def chromium(width: int = 1600, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        raise RuntimeError("chromium and chromium-driver are not installed. Fix: run bin/setup (it installs them "
                           "from Debian's packages)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield Browser(driver)
    finally:
        driver.quit()
