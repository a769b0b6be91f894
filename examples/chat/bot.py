"""A chat member in Python: the Python side of examples/chat.

It joins the shared document ``chat`` like any tab: it is present (the server keeps that, as
for every tab), and it answers a message ``/who`` with who is here, read from the document's
presence. Nothing in the room depends on it: the messages and presence live on the server.

    python examples/chat/bot.py [--url ws://127.0.0.1:8765] [--token JWT]
"""

from __future__ import annotations

import argparse
import asyncio

import octosync


async def bot(url: str, token: str | None) -> None:
    async with octosync.open_document(url, "chat", token=token) as doc:
        doc.presence.set({"name": "bot"})
        messages = doc.list("messages")
        await doc.synced()
        print(f"chat bot in the room at {url}", flush=True)
        answered = len(messages)
        while True:
            await doc.wait_until(lambda n=answered: len(messages) > n, timeout=None)
            for message in list(messages)[answered:]:
                if isinstance(message, dict) and str(message.get("text", "")).strip() == "/who":
                    names = sorted({str(p.get("name", "?")) for p in doc.presence.all.values()})
                    messages.push({"from": "bot", "text": "here: " + ", ".join(names)})
            answered = len(messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8765")
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    asyncio.run(bot(args.url, args.token))


if __name__ == "__main__":
    main()
