"""The portal in a real browser, each test one step of the small-business owner the portal is
built for (tests/browser/README.md): what the page shows, and what the API holds afterwards."""

import os
import random
import subprocess
import tempfile
import time

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from conftest import BIN, click, console, go, sign_in, visible, wait_for

SECTIONS = ["home", "conversations", "send", "campaigns", "contacts", "phones", "inbox", "webhooks", "drafts"]


def unique_number():
    """A fresh US number in national format and its E.164 form (415 555-01xx is fictional)."""
    line = random.randint(1000, 9999)
    return f"(415) 555-{line}", f"+1415555{line}"


def fill(element, text):
    element.clear()
    element.send_keys(text)


def outbound_to(server, key, number):
    status, envelope = server.api("GET", "/v1/messages", key, query={"direction": "outbound", "phone_number": number, "limit": 100})
    assert status == 200, envelope
    return [m for m in envelope["data"]["messages"] if m["to_number"] == number]


def test_a_wrong_key_is_refused_on_entry_and_a_remembered_key_stays(browser, server):
    browser.get(f"{server.base}/portal/")
    form = wait_for(lambda: visible(browser, "#key-form"), what="the sign-in form")
    form.find_element(By.ID, "api-key").send_keys("sk_test_" + "x" * 40)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    error = wait_for(lambda: visible(browser, '[data-error="key-form"]'), what="the refusal")
    assert "refused" in error.text
    # Nothing of the portal shows, no mode badge, and the key was not kept.
    assert visible(browser, "nav.sections") is None
    assert visible(browser, "#key-mode") is None
    assert browser.execute_script("return sessionStorage.length + localStorage.length") == 0

    # The right key, remembered: the workspace's name shows, and a reload keeps it signed in.
    fill(form.find_element(By.ID, "api-key"), server.test_key)
    form.find_element(By.ID, "key-remember").click()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: visible(browser, "#workspace"), what="signed in")
    assert browser.find_element(By.ID, "workspace-name").text == "default"
    assert "test" in browser.find_element(By.ID, "key-mode").text
    assert browser.execute_script("return localStorage.getItem('smsgw.api_key')") == server.test_key
    browser.refresh()
    wait_for(lambda: visible(browser, "#workspace"), what="still signed in after a reload")
    browser.find_element(By.ID, "key-forget").click()
    wait_for(lambda: visible(browser, "#key-form"), what="signed out")
    assert browser.execute_script("return sessionStorage.length + localStorage.length") == 0


def test_a_double_click_on_send_sends_one_message_to_a_national_number(browser, server):
    typed, e164 = unique_number()
    sign_in(browser, server, server.test_key, page="send")
    form = browser.find_element(By.ID, "send-form")
    fill(form.find_element(By.NAME, "from_number"), "+14155550100")
    fill(form.find_element(By.NAME, "to_number"), typed)
    form.find_element(By.NAME, "content").send_keys("Your cleaning is on Tuesday at 3 pm.")
    assert "1 SMS segment" in form.find_element(By.CSS_SELECTOR, '[data-counter="send-form"]').text
    ActionChains(browser).double_click(form.find_element(By.CSS_SELECTOR, "button[type=submit]")).perform()
    result = wait_for(lambda: form.find_element(By.CSS_SELECTOR, '[data-result="send-form"] p'), what="the send result")
    assert e164 in result.text
    # The counter starts again with the emptied box.
    assert form.find_element(By.NAME, "content").get_attribute("value") == ""
    assert "Empty" in form.find_element(By.CSS_SELECTOR, '[data-counter="send-form"]').text
    time.sleep(0.5)  # a second request, had one left, would have landed by now
    assert len(outbound_to(server, server.test_key, e164)) == 1


def test_a_national_number_is_normalised_with_the_default_country(browser, server):
    typed, e164 = unique_number()
    sign_in(browser, server, server.test_key, page="contacts")
    form = browser.find_element(By.ID, "contact-form")
    number = form.find_element(By.NAME, "phone_number")
    number.send_keys(typed)
    form.find_element(By.NAME, "first_name").click()  # leaving the field shows its E.164 form
    note = wait_for(lambda: form.find_element(By.CSS_SELECTOR, '[data-normalized="phone_number"]').text, what="the normalised number")
    assert e164 in note
    form.find_element(By.NAME, "first_name").send_keys("Nora")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: e164 in browser.find_element(By.ID, "contacts-list").text, what="the new contact listed")
    status, envelope = server.api("GET", "/v1/contacts", server.test_key, query={"q": e164})
    assert status == 200
    assert [c["first_name"] for c in envelope["data"]["contacts"] if c["phone_number"] == e164] == ["Nora"]

    # Something that is no number at all is refused in plain words, and nothing is created.
    fill(number, "call me maybe")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    error = wait_for(lambda: visible(browser, '[data-error="contact-form"]'), what="the error")
    assert "doesn't look like a phone number" in error.text


def preview_campaign(browser, name, body, recipients, launch_now):
    form = browser.find_element(By.ID, "campaign-form")
    fill(form.find_element(By.NAME, "name"), name)
    fill(form.find_element(By.NAME, "from_number"), "+14155550100")
    fill(form.find_element(By.NAME, "body"), body)
    fill(form.find_element(By.NAME, "recipients"), "\n".join(recipients))
    if launch_now:
        form.find_element(By.NAME, "launch_now").click()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    return wait_for(lambda: visible(browser, "#campaign-preview"), what="the preview")


def test_campaign_preview_warns_of_a_missing_variable(browser, server):
    (ann_typed, ann), (bob_typed, bob) = unique_number(), unique_number()
    sign_in(browser, server, server.test_key, page="campaigns")
    name = f"Reminders {ann}"
    preview = preview_campaign(
        browser,
        name,
        "Hi {{first_name}}, see you {{appointment}}.",
        [f"{ann_typed}; first_name=Ann; appointment=Tue 3pm", f"{bob_typed}; first_name=Bob"],
        launch_now=False,
    )
    summary = preview.find_element(By.CSS_SELECTOR, '[data-preview="summary"]').text
    assert "2 people will be texted from +14155550100" in summary, summary
    warning = preview.find_element(By.CSS_SELECTOR, '[data-preview="missing"]')
    assert warning.is_displayed()
    assert "1 recipient lacks" in warning.text and bob in warning.text and "appointment" in warning.text
    samples = preview.find_element(By.CSS_SELECTOR, '[data-preview="samples"]').text
    assert "Hi Ann, see you Tue 3pm." in samples
    assert "segment" in samples
    # The preview wrote nothing.
    status, envelope = server.api("GET", "/v1/campaigns", server.test_key, query={"limit": 100})
    assert status == 200
    assert not [c for c in envelope["data"]["campaigns"] if c["name"] == name]


def test_a_double_click_on_create_and_launch_makes_one_campaign(browser, server):
    (ann_typed, ann), (bob_typed, _) = unique_number(), unique_number()
    sign_in(browser, server, server.test_key, page="campaigns")
    name = f"Recall {ann}"
    preview = preview_campaign(browser, name, "Time for your check-up, {{first_name}}!", [f"{ann_typed}; first_name=Ann", f"{bob_typed}; first_name=Bob"], launch_now=True)
    confirm = preview.find_element(By.ID, "campaign-confirm")
    assert "text 2 now" in confirm.text
    ActionChains(browser).double_click(confirm).perform()
    wait_for(lambda: name in browser.find_element(By.ID, "campaigns-list").text, what="the campaign listed")
    time.sleep(0.5)
    status, envelope = server.api("GET", "/v1/campaigns", server.test_key, query={"limit": 100})
    assert status == 200
    made = [c for c in envelope["data"]["campaigns"] if c["name"] == name]
    assert len(made) == 1, made
    assert made[0]["counts"]["total"] == 2


def test_csv_import_with_a_header_row_previews_then_imports(browser, server):
    (ann_typed, ann), (_, bob) = unique_number(), unique_number()
    # Bob is already a contact: the import updates him.
    status, _ = server.api("POST", "/v1/contacts", server.test_key, {"phone_number": bob, "first_name": "Robert"})
    assert status in (200, 201)
    csv = f'Phone,First Name,Last Name,Email,Tags,Insurer\n"{ann_typed}",Ann,Lee,ann@example.com,patients;recall,Acme\n{bob},Bob,"Stone, Jr.",,,\n'
    path = os.path.join(tempfile.mkdtemp(), "patients.csv")
    with open(path, "w") as f:
        f.write(csv)
    sign_in(browser, server, server.test_key, page="contacts")
    form = browser.find_element(By.ID, "import-form")
    form.find_element(By.NAME, "file").send_keys(path)
    wait_for(lambda: "Insurer" in form.find_element(By.NAME, "csv").get_attribute("value"), what="the file read")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    preview = wait_for(lambda: visible(browser, "#import-preview"), what="the import preview")
    assert "1 new contact will be created and 1 updated" in preview.text
    assert ann in preview.text and bob in preview.text
    # The preview wrote nothing.
    status, envelope = server.api("GET", "/v1/contacts", server.test_key, query={"q": ann})
    assert not [c for c in envelope["data"]["contacts"] if c["phone_number"] == ann]
    preview.find_element(By.ID, "import-confirm").click()
    wait_for(lambda: "1 created, 1 updated" in form.text, what="the import result")
    status, envelope = server.api("GET", "/v1/contacts", server.test_key, query={"q": ann})
    (contact,) = [c for c in envelope["data"]["contacts"] if c["phone_number"] == ann]
    assert (contact["first_name"], contact["last_name"], contact["email"]) == ("Ann", "Lee", "ann@example.com")
    assert sorted(contact["tags"]) == ["patients", "recall"]
    assert contact["custom_fields"] == {"Insurer": "Acme"}
    status, envelope = server.api("GET", "/v1/contacts", server.test_key, query={"q": bob})
    (contact,) = [c for c in envelope["data"]["contacts"] if c["phone_number"] == bob]
    assert (contact["first_name"], contact["last_name"]) == ("Bob", "Stone, Jr.")


def test_an_open_timeline_survives_the_refresh(browser, server):
    _, e164 = unique_number()
    status, envelope = server.api("POST", "/v1/messages/send", server.test_key, {"from_number": "+14155550100", "to_number": e164, "content": "timeline"})
    assert status in (200, 201, 202), envelope
    sign_in(browser, server, server.test_key, page="inbox")
    section = browser.find_element(By.ID, "inbox")
    section.find_element(By.CSS_SELECTOR, 'select[name="direction"] option[value="outbound"]').click()
    fill(section.find_element(By.NAME, "phone_number"), e164)
    section.find_element(By.CSS_SELECTOR, "#inbox-filter button[type=submit]").click()
    row = f'#inbox-list li[data-message="{envelope["data"]["id"]}"]'
    wait_for(lambda: visible(browser, row), what="the message row")
    click(browser, row, ".//button[text()='Timeline']")
    wait_for(lambda: visible(browser, "#inbox-list ol.timeline"), what="the timeline")
    # A half-typed filter is not what the refresh uses.
    fill(section.find_element(By.NAME, "phone_number"), "+1415")
    stamp = browser.find_element(By.ID, "inbox-updated").text
    wait_for(lambda: browser.find_element(By.ID, "inbox-updated").text != stamp, what="a refresh")
    stamp = browser.find_element(By.ID, "inbox-updated").text
    wait_for(lambda: browser.find_element(By.ID, "inbox-updated").text != stamp, what="a second refresh")
    assert visible(browser, "#inbox-list ol.timeline") is not None, "the timeline was collapsed"
    assert visible(browser, '[data-error="inbox"]') is None
    assert len(browser.find_elements(By.CSS_SELECTOR, "#inbox-list li.message")) == 1


def test_a_phone_paired_in_the_browser_turns_online_on_its_own(browser, server):
    typed, e164 = unique_number()
    sign_in(browser, server, server.live_key, page="phones")
    form = browser.find_element(By.ID, "pair-form")
    form.find_element(By.NAME, "phone_number").send_keys(typed)
    form.find_element(By.NAME, "name").send_keys("Front desk")
    ActionChains(browser).double_click(form.find_element(By.CSS_SELECTOR, "button[type=submit]")).perform()
    panel = wait_for(lambda: visible(browser, "#pairing"), what="the pairing panel")
    token = wait_for(lambda: panel.find_element(By.CSS_SELECTOR, '[data-pairing="token"]').text, what="the token")
    assert token.startswith("dt_")
    assert panel.find_element(By.CSS_SELECTOR, '[data-pairing="api-url"]').text == f"{server.base}/mobile/v1"
    assert panel.find_element(By.CSS_SELECTOR, '[data-pairing="websocket-url"]').text.startswith("ws://127.0.0.1:")
    assert panel.find_elements(By.CSS_SELECTOR, "#pairing-qr svg path")
    assert "waiting" in panel.find_element(By.CSS_SELECTOR, '[data-pairing="state"]').text
    # One phone, despite the double-click.
    status, envelope = server.api("GET", "/v1/phones", server.live_key, query={"limit": 100})
    assert [p["phone_number"] for p in envelope["data"]["phones"]].count(e164) == 1
    device_id = next(p["id"] for p in envelope["data"]["phones"] if p["phone_number"] == e164)
    # The phone's second SIM: a line, listed under its device, with no token to rotate.
    _, line_e164 = unique_number()
    status, created = server.api("POST", "/v1/phones", server.live_key, body={"phone_number": line_e164, "device_phone_id": device_id, "sim_slot": 2})
    assert status == 201 and "device_token" not in created["data"], created
    line_id = created["data"]["id"]
    line_row = f'#phones-list li.phone.line[data-phone-id="{line_id}"]'
    under_device = "const l = document.querySelector(arguments[0]); return !!l && !!l.previousElementSibling && l.previousElementSibling.dataset.phoneId === arguments[1];"
    wait_for(lambda: browser.execute_script(under_device, line_row, device_id), timeout=15, what="the line listed under its device")
    assert "SIM 2 of" in browser.find_element(By.CSS_SELECTOR, line_row).text
    assert "New device token" not in browser.find_element(By.CSS_SELECTOR, line_row).text
    sim = subprocess.Popen([BIN, "phone-sim", "--server", server.base, "--token", token], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: panel.find_element(By.CSS_SELECTOR, '[data-pairing="state"]').text == "connected", timeout=15, what="the panel turning green")
        row = browser.find_element(By.CSS_SELECTOR, "#phones-list li.phone")
        wait_for(lambda: "online" in browser.find_element(By.ID, "phones-list").text, what="the row online")
        # The line rides on its device's connection.
        wait_for(lambda: "online" in browser.find_element(By.CSS_SELECTOR, line_row).text, what="the line online")
    finally:
        sim.terminate()
        sim.wait(10)
    wait_for(lambda: "offline" in browser.find_element(By.ID, "phones-list").text, timeout=15, what="the row offline again")
    wait_for(lambda: "offline" in browser.find_element(By.CSS_SELECTOR, line_row).text, timeout=15, what="the line offline again")
    assert row is not None


def test_each_phone_row_shows_its_last_7_days_of_delivery(browser, server):
    _, e164 = unique_number()
    status, created = server.api("POST", "/v1/phones", server.live_key, body={"phone_number": e164, "name": "Stats"})
    assert status == 201, created
    phone_id, token = created["data"]["id"], created["data"]["device_token"]
    sim = subprocess.Popen([BIN, "phone-sim", "--server", server.base, "--token", token, "--deliver-after-ms", "50"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def online():
            _, phone = server.api("GET", f"/v1/phones/{phone_id}", server.live_key)
            return phone["data"]["online"]
        wait_for(online, timeout=15, what="the simulated phone online")
        _, to = unique_number()
        status, sent = server.api("POST", "/v1/messages/send", server.live_key, body={"from_number": e164, "to_number": to, "content": "counted"})
        assert status == 202, sent

        def counted():
            _, stats = server.api("GET", f"/v1/phones/{phone_id}/stats", server.live_key, query={"days": 7})
            return stats["data"]["totals"]["delivered"] == 1
        wait_for(counted, timeout=15, what="the delivery counted")
    finally:
        sim.terminate()
        sim.wait(10)
    sign_in(browser, server, server.live_key, page="phones")
    row = f'#phones-list li.phone[data-phone-id="{phone_id}"] [data-line-stats]'
    text = wait_for(lambda: "1 delivered" in browser.find_element(By.CSS_SELECTOR, row).text and browser.find_element(By.CSS_SELECTOR, row).text, timeout=15, what="the row's figures")
    assert "1 sent, 1 delivered, 0 failed" in text, text
    assert "100% delivered" in text and "to deliver" in text, text


def test_reply_from_a_conversation(browser, server):
    typed, customer = unique_number()
    status, envelope = server.api("POST", "/v1/test/inbound", server.test_key, {"from_number": customer, "to_number": "+14155550100", "content": "Can I move my appointment to Friday?"})
    assert status in (200, 201), envelope
    server.api("POST", "/v1/contacts", server.test_key, {"phone_number": customer, "first_name": "Carla"})
    sign_in(browser, server, server.test_key, page="conversations")
    row = f'#conversations-list li[data-number="{customer}"]'
    wait_for(lambda: "Carla" in visible(browser, row).text, what="the conversation, with the contact's name")
    click(browser, row)
    thread = wait_for(lambda: visible(browser, "#thread"), what="the thread")
    wait_for(lambda: "move my appointment" in thread.text, what="the customer's message")
    form = thread.find_element(By.ID, "reply-form")
    assert form.find_element(By.NAME, "from_number").get_attribute("value") == "+14155550100"
    form.find_element(By.NAME, "content").send_keys("Friday 10 am works, see you then.")
    ActionChains(browser).double_click(form.find_element(By.CSS_SELECTOR, "button[type=submit]")).perform()
    def replies():
        return [b.text for b in thread.find_elements(By.CSS_SELECTOR, "li.bubble.outbound")]

    wait_for(lambda: len(replies()) == 1 and "Friday 10 am works" in replies()[0], what="the reply in the thread")
    time.sleep(0.5)
    sent = outbound_to(server, server.test_key, customer)
    assert [(m["from_number"], m["content"]) for m in sent] == [("+14155550100", "Friday 10 am works, see you then.")]


def test_home_shows_todays_figures_and_a_7_day_chart(browser, server):
    _, e164 = unique_number()
    status, envelope = server.api("POST", "/v1/messages/send", server.test_key, {"from_number": "+14155550100", "to_number": e164, "content": "figures"})
    assert status in (200, 201, 202), envelope
    sign_in(browser, server, server.test_key, page="home")

    def shown_and_held():
        sent = int(browser.find_element(By.CSS_SELECTOR, '[data-figure="sent"]').text)
        _, overview = server.api("GET", "/v1/overview", server.test_key)
        return sent >= 1 and sent == overview["data"]["today"]["sent"]

    wait_for(shown_and_held, what="today's sent figure, as the API counts it")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart svg rect")) == 7 * 4
    labels = browser.find_elements(By.CSS_SELECTOR, "#chart svg text.middle")
    assert len(labels) == 7


def test_every_page_fits_390_px_and_logs_no_error(browser, server):
    sign_in(browser, server, server.test_key)
    # A 390 px wide window (not a zoomable mobile viewport, which would widen to fit the page).
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": False})
    assert browser.execute_script("return window.innerWidth") == 390
    for section in SECTIONS:
        go(browser, section)
        time.sleep(0.3)  # its lists load
        width = browser.execute_script("return document.documentElement.scrollWidth")
        assert width <= 390, f"#{section} is {width} px wide on a 390 px screen"
    severe = [e for e in console(browser) if e["level"] == "SEVERE"]
    assert not severe, severe
    # The API reference asks for nothing that is missing either (its favicon included).
    browser.get(f"{server.base}/docs")
    wait_for(lambda: browser.find_elements(By.TAG_NAME, "h2"), what="the reference page")
    time.sleep(0.3)
    severe = [e for e in console(browser) if e["level"] == "SEVERE"]
    assert not severe, severe


# WCAG 2 contrast of every visible control and text of the open section, in the page (one
# call, so nothing goes stale while a list redraws): [checked, [failures]].
CONTRAST_JS = """
const channel = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
const rgba = (css) => (css.match(/[\\d.]+/g) || []).map(Number);
const lum = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
const background = (el) => {
  for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
    const c = rgba(getComputedStyle(node).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c;
  }
  return rgba(getComputedStyle(document.body).backgroundColor);
};
let checked = 0;
const failures = [];
const scope = document.querySelector(arguments[0]);
for (const el of scope.querySelectorAll('button, a, .badge, label, .note, .error, .warning, h2, h3, p, legend, summary')) {
  if (!el.getClientRects().length || el.disabled || !el.textContent.trim()) continue;
  const fg = rgba(getComputedStyle(el).color);
  const bg = background(el);
  const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
  const ratio = (hi + 0.05) / (lo + 0.05);
  checked += 1;
  if (ratio < 4.5) failures.push(`${el.tagName} "${el.textContent.trim().slice(0, 30)}": ${getComputedStyle(el).color} on rgb(${bg}) = ${ratio.toFixed(2)}:1`);
}
return [checked, failures];
"""


def test_dark_mode_text_has_enough_contrast(browser, server):
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    sign_in(browser, server, server.test_key, page="send")
    assert browser.execute_script("return matchMedia('(prefers-color-scheme: dark)').matches")
    body = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert body == "rgb(22, 22, 26)", f"the page is not dark: {body}"
    total = 0
    for section in SECTIONS:
        go(browser, section)
        checked, failures = browser.execute_script(CONTRAST_JS, "body")
        assert not failures, f"#{section}: {failures}"
        total += checked
    assert total > 100, total


def test_a_low_battery_shows_a_banner_with_the_checklist(browser, server):
    typed, e164 = unique_number()
    status, created = server.api("POST", "/v1/phones", server.live_key, body={"phone_number": e164, "name": "Flat phone"})
    assert status == 201, created
    token = created["data"]["device_token"]
    phone_id = created["data"]["id"]
    sign_in(browser, server, server.live_key, page="phones")
    sim = subprocess.Popen([BIN, "phone-sim", "--server", server.base, "--token", token, "--battery", "9"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        row = f'#phones-list li.phone[data-phone-id="{phone_id}"]'
        wait_for(lambda: "low battery" in browser.find_element(By.CSS_SELECTOR, row).text, timeout=20, what="the row's low battery state")
        assert "battery 9%" in browser.find_element(By.CSS_SELECTOR, row).text
        banner = wait_for(lambda: visible(browser, "#phone-alerts"), timeout=20, what="the alert banner")
        text = banner.text
        assert "Flat phone" in text and "low battery" in text, text
        assert "Battery optimisation off" in text and "restricted settings" in text, text
        assert "docs/android.md" in text, text
    finally:
        sim.terminate()
        sim.wait(10)
