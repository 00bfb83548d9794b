"""Write the extra question sets the shipped probes are trained on (``data/probe_training/questions``).

Two sets, both short QA in the shared schema (``id``, ``question``, ``answers``, ...), graded so that
a small model gets some right and some wrong, which gives the probe both classes:

* ``arithmetic.jsonl``: generated sums, differences and products, from one-digit to three-digit
  operands, in several phrasings (seeded, reproducible);
* ``world_facts.jsonl``: hand-written facts from well known (capital of Germany) to obscure (capital
  of Vanuatu), across geography, chemistry, literature, science and everyday numbers.

The labels come from sampling the model itself (``python -m grade label --matcher lenient``), not
from the difficulty we had in mind: see ``scripts/build_probes.py``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "probe_training" / "questions"

PHRASES = {
    "+": ["What is {a} + {b}?", "What is {a} plus {b}?", "Compute {a} + {b}.", "How much is {a} plus {b}?",
          "Add {a} and {b}.", "What is the sum of {a} and {b}?"],
    "-": ["What is {a} - {b}?", "What is {a} minus {b}?", "Compute {a} - {b}.", "Subtract {b} from {a}.",
          "How much is {a} minus {b}?"],
    "*": ["What is {a} * {b}?", "What is {a} times {b}?", "Compute {a} x {b}.", "Multiply {a} by {b}.",
          "What is the product of {a} and {b}?", "How much is {a} times {b}?"],
}

# (operator, range of a, range of b, how many)
LEVELS = [
    ("+", (1, 9), (1, 9), 30), ("+", (10, 99), (1, 9), 25), ("+", (10, 99), (10, 99), 30), ("+", (100, 999), (100, 999), 25),
    ("-", (5, 9), (1, 5), 20), ("-", (20, 99), (10, 19), 25), ("-", (100, 999), (10, 99), 20),
    ("*", (2, 9), (2, 9), 30), ("*", (10, 30), (2, 9), 25), ("*", (11, 99), (11, 99), 30), ("*", (100, 999), (11, 99), 20),
]

WORLD_FACTS = [
    # capitals, well known to obscure
    ("capital", "What is the capital of Germany?", ["Berlin"]),
    ("capital", "What is the capital of Spain?", ["Madrid"]),
    ("capital", "What is the capital of the United Kingdom?", ["London"]),
    ("capital", "What is the capital of Russia?", ["Moscow"]),
    ("capital", "What is the capital of China?", ["Beijing", "Peking"]),
    ("capital", "What is the capital of Egypt?", ["Cairo"]),
    ("capital", "What is the capital of Greece?", ["Athens"]),
    ("capital", "What is the capital of Canada?", ["Ottawa"]),
    ("capital", "What is the capital of Australia?", ["Canberra"]),
    ("capital", "What is the capital of Brazil?", ["Brasilia", "Brasília"]),
    ("capital", "What is the capital of Argentina?", ["Buenos Aires"]),
    ("capital", "What is the capital of Mexico?", ["Mexico City"]),
    ("capital", "What is the capital of India?", ["New Delhi", "Delhi"]),
    ("capital", "What is the capital of Portugal?", ["Lisbon", "Lisboa"]),
    ("capital", "What is the capital of Ireland?", ["Dublin"]),
    ("capital", "What is the capital of Sweden?", ["Stockholm"]),
    ("capital", "What is the capital of Norway?", ["Oslo"]),
    ("capital", "What is the capital of Austria?", ["Vienna", "Wien"]),
    ("capital", "What is the capital of Turkey?", ["Ankara"]),
    ("capital", "What is the capital of Kenya?", ["Nairobi"]),
    ("capital", "What is the capital of Peru?", ["Lima"]),
    ("capital", "What is the capital of Thailand?", ["Bangkok"]),
    ("capital", "What is the capital of South Korea?", ["Seoul"]),
    ("capital", "What is the capital of Poland?", ["Warsaw", "Warszawa"]),
    ("capital", "What is the capital of Hungary?", ["Budapest"]),
    ("capital", "What is the capital of Finland?", ["Helsinki"]),
    ("capital", "What is the capital of Denmark?", ["Copenhagen"]),
    ("capital", "What is the capital of Cuba?", ["Havana", "La Habana"]),
    ("capital", "What is the capital of Chile?", ["Santiago"]),
    ("capital", "What is the capital of Colombia?", ["Bogota", "Bogotá"]),
    ("capital", "What is the capital of Vietnam?", ["Hanoi", "Ha Noi"]),
    ("capital", "What is the capital of Iran?", ["Tehran"]),
    ("capital", "What is the capital of Pakistan?", ["Islamabad"]),
    ("capital", "What is the capital of Nigeria?", ["Abuja"]),
    ("capital", "What is the capital of Morocco?", ["Rabat"]),
    ("capital", "What is the capital of New Zealand?", ["Wellington"]),
    ("capital", "What is the capital of Switzerland?", ["Bern", "Berne"]),
    ("capital", "What is the capital of Mongolia?", ["Ulaanbaatar", "Ulan Bator"]),
    ("capital", "What is the capital of Kazakhstan?", ["Astana", "Nur-Sultan"]),
    ("capital", "What is the capital of Vanuatu?", ["Port Vila"]),
    ("capital", "What is the capital of Eritrea?", ["Asmara"]),
    ("capital", "What is the capital of Paraguay?", ["Asuncion", "Asunción"]),
    ("capital", "What is the capital of Laos?", ["Vientiane"]),
    ("capital", "What is the capital of Tajikistan?", ["Dushanbe"]),
    ("capital", "What is the capital of Malawi?", ["Lilongwe"]),
    ("capital", "What is the capital of Suriname?", ["Paramaribo"]),
    ("capital", "What is the capital of Moldova?", ["Chisinau", "Chișinău", "Kishinev"]),
    ("capital", "What is the capital of Lesotho?", ["Maseru"]),
    ("capital", "What is the capital of Tuvalu?", ["Funafuti"]),
    ("capital", "What is the capital of Djibouti?", ["Djibouti"]),
    ("capital", "What is the capital of Mauritania?", ["Nouakchott"]),
    ("capital", "What is the capital of Kyrgyzstan?", ["Bishkek"]),
    ("capital", "What is the capital of Brunei?", ["Bandar Seri Begawan"]),
    ("capital", "What is the capital of Comoros?", ["Moroni"]),
    ("capital", "What is the capital of Liechtenstein?", ["Vaduz"]),
    ("capital", "What is the capital of the Solomon Islands?", ["Honiara"]),
    # chemistry
    ("chemistry", "What is the chemical symbol for gold?", ["Au"]),
    ("chemistry", "What is the chemical symbol for iron?", ["Fe"]),
    ("chemistry", "What is the chemical symbol for oxygen?", ["O"]),
    ("chemistry", "What is the chemical symbol for sodium?", ["Na"]),
    ("chemistry", "What is the chemical symbol for silver?", ["Ag"]),
    ("chemistry", "What is the chemical formula of water?", ["H2O", "H₂O"]),
    ("chemistry", "Which gas do plants absorb from the air for photosynthesis?", ["carbon dioxide", "CO2"]),
    ("chemistry", "Which element has the atomic number 1?", ["hydrogen"]),
    ("chemistry", "Which element has the chemical symbol He?", ["helium"]),
    ("chemistry", "Which element has the atomic number 74?", ["tungsten", "wolfram"]),
    ("chemistry", "Which element has the chemical symbol Sb?", ["antimony"]),
    ("chemistry", "Which element has the atomic number 39?", ["yttrium"]),
    ("chemistry", "Which element has the chemical symbol Rh?", ["rhodium"]),
    ("chemistry", "Which element has the atomic number 64?", ["gadolinium"]),
    ("chemistry", "Which element has the chemical symbol Tl?", ["thallium"]),
    ("chemistry", "Which element has the atomic number 55?", ["caesium", "cesium"]),
    # literature and art
    ("literature", "Who wrote Romeo and Juliet?", ["Shakespeare", "William Shakespeare"]),
    ("literature", "Who wrote the Harry Potter books?", ["Rowling", "J. K. Rowling", "J.K. Rowling"]),
    ("literature", "Who painted the Mona Lisa?", ["Leonardo da Vinci", "Leonardo", "da Vinci"]),
    ("literature", "Who wrote Pride and Prejudice?", ["Jane Austen", "Austen"]),
    ("literature", "Who wrote The Adventures of Tom Sawyer?", ["Mark Twain", "Twain", "Samuel Clemens"]),
    ("literature", "Who wrote War and Peace?", ["Tolstoy", "Leo Tolstoy"]),
    ("literature", "Who wrote Don Quixote?", ["Cervantes", "Miguel de Cervantes"]),
    ("literature", "Who composed the Moonlight Sonata?", ["Beethoven", "Ludwig van Beethoven"]),
    ("literature", "Who wrote the novel Nineteen Eighty-Four?", ["George Orwell", "Orwell"]),
    ("literature", "Who wrote the novel The Master and Margarita?", ["Bulgakov", "Mikhail Bulgakov"]),
    ("literature", "Who wrote the novel Independent People?", ["Halldor Laxness", "Laxness", "Halldór Laxness"]),
    ("literature", "Who composed the opera Rusalka?", ["Dvorak", "Dvořák", "Antonin Dvorak"]),
    ("literature", "Who wrote the novel The Leopard?", ["Lampedusa", "Giuseppe Tomasi di Lampedusa"]),
    ("literature", "Who painted The Garden of Earthly Delights?", ["Bosch", "Hieronymus Bosch"]),
    ("literature", "Who wrote the play The Cherry Orchard?", ["Chekhov", "Anton Chekhov"]),
    ("literature", "Who wrote the novel Pedro Paramo?", ["Juan Rulfo", "Rulfo"]),
    ("literature", "Who composed the Carnival of the Animals?", ["Saint-Saens", "Saint-Saëns", "Camille Saint-Saens"]),
    ("literature", "Who wrote the novel Kristin Lavransdatter?", ["Sigrid Undset", "Undset"]),
    # science and nature
    ("science", "What is the largest planet in the solar system?", ["Jupiter"]),
    ("science", "Which planet is closest to the Sun?", ["Mercury"]),
    ("science", "Which planet is known as the Red Planet?", ["Mars"]),
    ("science", "What is the largest ocean on Earth?", ["Pacific", "Pacific Ocean"]),
    ("science", "What is the fastest land animal?", ["cheetah"]),
    ("science", "What is the largest mammal?", ["blue whale", "whale"]),
    ("science", "What is the hardest natural substance?", ["diamond"]),
    ("science", "What organ pumps blood through the human body?", ["heart"]),
    ("science", "At what temperature in Celsius does water freeze?", ["0", "zero"]),
    ("science", "What is the longest river in Africa?", ["Nile", "the Nile"]),
    ("science", "What is the tallest mountain in the world?", ["Everest", "Mount Everest"]),
    ("science", "What is the largest moon of Saturn?", ["Titan"]),
    ("science", "Which bone is the longest in the human body?", ["femur", "thigh bone"]),
    ("science", "What is the smallest planet in the solar system?", ["Mercury"]),
    ("science", "Which moon of Neptune is the largest?", ["Triton"]),
    ("science", "What is the name of the largest moon of Uranus?", ["Titania"]),
    ("science", "What is the highest mountain in Africa?", ["Kilimanjaro", "Mount Kilimanjaro"]),
    ("science", "What is the deepest lake in the world?", ["Baikal", "Lake Baikal"]),
    ("science", "Which scientist proposed the three laws of planetary motion?", ["Kepler", "Johannes Kepler"]),
    ("science", "What is the unit of electrical resistance?", ["ohm", "ohms"]),
    ("science", "What is the SI unit of magnetic flux?", ["weber"]),
    ("science", "What is the longest river in Asia?", ["Yangtze", "Chang Jiang", "Yangtze River"]),
    ("science", "Which blood cells carry oxygen?", ["red blood cells", "red", "erythrocytes"]),
    ("science", "What is the study of fungi called?", ["mycology"]),
    # everyday numbers
    ("numbers", "How many days are in a week?", ["7", "seven"]),
    ("numbers", "How many legs does a spider have?", ["8", "eight"]),
    ("numbers", "How many continents are there?", ["7", "seven"]),
    ("numbers", "How many hours are in a day?", ["24", "twenty-four", "twenty four"]),
    ("numbers", "How many minutes are in an hour?", ["60", "sixty"]),
    ("numbers", "How many sides does a hexagon have?", ["6", "six"]),
    ("numbers", "How many players are on a soccer team on the field?", ["11", "eleven"]),
    ("numbers", "How many strings does a standard violin have?", ["4", "four"]),
    ("numbers", "How many bones are in the adult human body?", ["206"]),
    ("numbers", "How many keys does a standard piano have?", ["88", "eighty-eight"]),
    ("numbers", "How many hearts does an octopus have?", ["3", "three"]),
    ("numbers", "How many squares are on a chessboard?", ["64", "sixty-four"]),
    ("numbers", "In what year did the Berlin Wall fall?", ["1989"]),
    ("numbers", "In what year did the First World War begin?", ["1914"]),
    ("numbers", "In what year was the Magna Carta sealed?", ["1215"]),
    ("numbers", "In what year did the Battle of Hastings take place?", ["1066"]),
    ("numbers", "In what year was the Treaty of Westphalia signed?", ["1648"]),
    ("numbers", "In what year did the Byzantine capital Constantinople fall?", ["1453"]),
    # currencies and languages
    ("currency", "What is the currency of Japan?", ["yen"]),
    ("currency", "What is the currency of the United Kingdom?", ["pound", "pound sterling", "sterling"]),
    ("currency", "What is the currency of the United States?", ["dollar", "US dollar"]),
    ("currency", "What is the currency of Mongolia?", ["tugrik", "tögrög", "togrog"]),
    ("currency", "What is the currency of Georgia?", ["lari"]),
    ("currency", "What is the currency of Guatemala?", ["quetzal"]),
    ("currency", "What is the currency of Botswana?", ["pula"]),
    ("currency", "What is the currency of Ethiopia?", ["birr"]),
    ("language", "What language is mainly spoken in Brazil?", ["Portuguese"]),
    ("language", "What language is mainly spoken in France?", ["French"]),
    ("language", "What is the official language of Iran?", ["Persian", "Farsi"]),
    ("language", "What is the official language of Ethiopia?", ["Amharic"]),
]


def arithmetic(seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows, seen = [], set()
    for op, (a_lo, a_hi), (b_lo, b_hi), count in LEVELS:
        made = 0
        while made < count:
            a, b = rng.randint(a_lo, a_hi), rng.randint(b_lo, b_hi)
            if (op, a, b) in seen:
                continue
            seen.add((op, a, b))
            value = a + b if op == "+" else a - b if op == "-" else a * b
            question = rng.choice(PHRASES[op]).format(a=a, b=b)
            answers = [str(value)] + ([f"{value:,}"] if value >= 1000 else [])
            level = f"{op}{len(str(a_hi))}x{len(str(b_hi))}"
            rows.append({"id": f"arith-{level}-{a}-{b}", "question": question, "answers": answers,
                         "solution": None, "context": None, "choices": None, "subject": level})
            made += 1
    return rows


def world_facts() -> list[dict]:
    rows = []
    for number, (subject, question, answers) in enumerate(WORLD_FACTS):
        rows.append({"id": f"world-{subject}-{number:03d}", "question": question, "answers": answers,
                     "solution": None, "context": None, "choices": None, "subject": subject})
    return rows


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("arithmetic", arithmetic()), ("world_facts", world_facts())):
        path = OUT / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"{len(rows)} questions -> {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
