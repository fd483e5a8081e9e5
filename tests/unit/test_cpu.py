from plt_bench import cpu
from plt_bench.cpu import cpu_by_role


def test_roles_from_chromium_command_lines():
    assert cpu.role(["/usr/lib/chromium/chromium", "--headless=new", "--no-sandbox"]) == "browser"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=renderer", "--lang=en"]) == "renderer"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=gpu-process"]) == "gpu"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=utility",
                     "--utility-sub-type=network.mojom.NetworkService"]) == "network"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=utility",
                     "--utility-sub-type=storage.mojom.StorageService"]) == "utility"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=zygote"]) == "zygote"
    assert cpu.role(["/usr/bin/chromedriver", "--port=1234"]) == "chromedriver"
    assert cpu.role([]) == "other"


def test_cpu_by_role_adds_caddy_and_linkem():
    out = cpu_by_role({"renderer": {"user_s": 0.5, "system_s": 0.1, "processes": 1}}, (1.0, 2.0), (1.5, 2.25),
                      {"cpu_s": 0.2})
    assert out["caddy"] == {"user_s": 0.5, "system_s": 0.25, "processes": 1}
    assert out["linkem"]["total_s"] == 0.2 and out["renderer"]["user_s"] == 0.5
    assert cpu_by_role(None, None, None, None) is None
