"""Write the extra question sets the shipped probes are trained on (``data/probe_training/questions``).

Two sets, both short QA in the shared schema (``id``, ``question``, ``answers``, ...), graded so that
a small model gets some right and some wrong, which gives the probe both classes:

* ``arithmetic.jsonl``: generated sums, differences and products, from one-digit to three-digit
  operands, in several phrasings (seeded, reproducible);
* ``reworded.jsonl``: every world fact once more in another wording, and new sums in other wordings
  (a probe that sees one wording per kind of question learns the wording);
* ``world_facts.jsonl``: hand-written facts from well known (capital of Greece) to obscure (capital
  of Comoros), across geography, chemistry, literature, science and everyday numbers; questions
  that are also in ``sample_data/`` are left out.

The labels come from sampling the model itself (``python -m grade label --matcher lenient``), not
from the difficulty we had in mind: see ``scripts/build/build_probes.py``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "data" / "probe_training" / "questions"
CHECK_OUT = ROOT / "data" / "probe_check" / "questions"  # never trained on

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
    # second batch: more countries, cities, elements, people and things (appended: ids stay stable)
    ("capital", "What is the capital of Italy?", ["Rome", "Roma"]),
    ("capital", "What is the capital of Japan?", ["Tokyo"]),
    ("capital", "What is the capital of Belgium?", ["Brussels", "Bruxelles"]),
    ("capital", "What is the capital of the Netherlands?", ["Amsterdam"]),
    ("capital", "What is the capital of Saudi Arabia?", ["Riyadh"]),
    ("capital", "What is the capital of Indonesia?", ["Jakarta"]),
    ("capital", "What is the capital of the Philippines?", ["Manila"]),
    ("capital", "What is the capital of Ukraine?", ["Kyiv", "Kiev"]),
    ("capital", "What is the capital of Israel?", ["Jerusalem"]),
    ("capital", "What is the capital of Iraq?", ["Baghdad"]),
    ("capital", "What is the capital of Afghanistan?", ["Kabul"]),
    ("capital", "What is the capital of Venezuela?", ["Caracas"]),
    ("capital", "What is the capital of Czechia?", ["Prague", "Praha"]),
    ("capital", "What is the capital of Romania?", ["Bucharest"]),
    ("capital", "What is the capital of Bulgaria?", ["Sofia"]),
    ("capital", "What is the capital of Serbia?", ["Belgrade"]),
    ("capital", "What is the capital of Croatia?", ["Zagreb"]),
    ("capital", "What is the capital of Iceland?", ["Reykjavik", "Reykjavík"]),
    ("capital", "What is the capital of Syria?", ["Damascus"]),
    ("capital", "What is the capital of Lebanon?", ["Beirut"]),
    ("capital", "What is the capital of Jordan?", ["Amman"]),
    ("capital", "What is the capital of Ghana?", ["Accra"]),
    ("capital", "What is the capital of Ethiopia?", ["Addis Ababa"]),
    ("capital", "What is the capital of Senegal?", ["Dakar"]),
    ("capital", "What is the capital of Uruguay?", ["Montevideo"]),
    ("capital", "What is the capital of Ecuador?", ["Quito"]),
    ("capital", "What is the capital of Bolivia?", ["Sucre", "La Paz"]),
    ("capital", "What is the capital of Nepal?", ["Kathmandu"]),
    ("capital", "What is the capital of Sri Lanka?", ["Sri Jayawardenepura Kotte", "Kotte", "Colombo"]),
    ("capital", "What is the capital of Bangladesh?", ["Dhaka"]),
    ("capital", "What is the capital of Malaysia?", ["Kuala Lumpur"]),
    ("capital", "What is the capital of Singapore?", ["Singapore"]),
    ("capital", "What is the capital of Latvia?", ["Riga"]),
    ("capital", "What is the capital of Lithuania?", ["Vilnius"]),
    ("capital", "What is the capital of Estonia?", ["Tallinn"]),
    ("capital", "What is the capital of Slovenia?", ["Ljubljana"]),
    ("capital", "What is the capital of Slovakia?", ["Bratislava"]),
    ("capital", "What is the capital of Albania?", ["Tirana", "Tirane"]),
    ("capital", "What is the capital of Armenia?", ["Yerevan"]),
    ("capital", "What is the capital of Azerbaijan?", ["Baku"]),
    ("capital", "What is the capital of Turkmenistan?", ["Ashgabat"]),
    ("capital", "What is the capital of Uzbekistan?", ["Tashkent"]),
    ("capital", "What is the capital of Zambia?", ["Lusaka"]),
    ("capital", "What is the capital of Zimbabwe?", ["Harare"]),
    ("capital", "What is the capital of Namibia?", ["Windhoek"]),
    ("capital", "What is the capital of Mozambique?", ["Maputo"]),
    ("capital", "What is the capital of Madagascar?", ["Antananarivo"]),
    ("capital", "What is the capital of Rwanda?", ["Kigali"]),
    ("capital", "What is the capital of Burundi?", ["Gitega"]),
    ("capital", "What is the capital of Gabon?", ["Libreville"]),
    ("capital", "What is the capital of Niger?", ["Niamey"]),
    ("capital", "What is the capital of Chad?", ["N'Djamena", "Ndjamena"]),
    ("capital", "What is the capital of Belize?", ["Belmopan"]),
    ("capital", "What is the capital of Honduras?", ["Tegucigalpa"]),
    ("capital", "What is the capital of Nicaragua?", ["Managua"]),
    ("capital", "What is the capital of Fiji?", ["Suva"]),
    ("capital", "What is the capital of Samoa?", ["Apia"]),
    ("capital", "What is the capital of Palau?", ["Ngerulmud"]),
    ("capital", "What is the capital of Bhutan?", ["Thimphu"]),
    ("capital", "What is the capital of Andorra?", ["Andorra la Vella"]),
    # cities and countries
    ("geography", "In which country is the city of Kyoto?", ["Japan"]),
    ("geography", "In which country is the Eiffel Tower?", ["France"]),
    ("geography", "In which country are the pyramids of Giza?", ["Egypt"]),
    ("geography", "In which country is the Taj Mahal?", ["India"]),
    ("geography", "In which country is the Colosseum?", ["Italy"]),
    ("geography", "In which city is the Statue of Liberty?", ["New York", "New York City"]),
    ("geography", "In which country is Machu Picchu?", ["Peru"]),
    ("geography", "In which country is the city of Timbuktu?", ["Mali"]),
    ("geography", "In which country is the city of Samarkand?", ["Uzbekistan"]),
    ("geography", "In which country is the city of Tabriz?", ["Iran"]),
    ("geography", "In which country is the city of Porto?", ["Portugal"]),
    ("geography", "In which country is the city of Mombasa?", ["Kenya"]),
    ("geography", "In which country is the city of Cusco?", ["Peru"]),
    ("geography", "In which country is the city of Bergen?", ["Norway"]),
    ("geography", "In which country is the city of Tromso?", ["Norway"]),
    ("geography", "In which country is the city of Arequipa?", ["Peru"]),
    ("geography", "In which country is the city of Mandalay?", ["Myanmar", "Burma"]),
    ("geography", "In which country is the city of Gdansk?", ["Poland"]),
    ("geography", "In which country is the city of Plovdiv?", ["Bulgaria"]),
    ("geography", "In which country is the city of Kumasi?", ["Ghana"]),
    ("geography", "On which continent is Brazil?", ["South America"]),
    ("geography", "On which continent is Kenya?", ["Africa"]),
    ("geography", "What is the largest country in the world by area?", ["Russia"]),
    ("geography", "What is the largest desert in Africa?", ["Sahara", "the Sahara"]),
    ("geography", "Which river flows through Paris?", ["Seine", "the Seine"]),
    ("geography", "Which river flows through London?", ["Thames", "the Thames"]),
    ("geography", "Which river flows through Budapest?", ["Danube", "the Danube"]),
    ("geography", "Which river flows through Baghdad?", ["Tigris", "the Tigris"]),
    ("geography", "Which river flows through Lyon besides the Rhone?", ["Saone", "Saône"]),
    # more elements
    ("chemistry", "What is the chemical symbol for carbon?", ["C"]),
    ("chemistry", "What is the chemical symbol for hydrogen?", ["H"]),
    ("chemistry", "What is the chemical symbol for potassium?", ["K"]),
    ("chemistry", "What is the chemical symbol for copper?", ["Cu"]),
    ("chemistry", "What is the chemical symbol for lead?", ["Pb"]),
    ("chemistry", "What is the chemical symbol for tin?", ["Sn"]),
    ("chemistry", "What is the chemical symbol for mercury?", ["Hg"]),
    ("chemistry", "What is the chemical symbol for tungsten?", ["W"]),
    ("chemistry", "What is the chemical symbol for niobium?", ["Nb"]),
    ("chemistry", "What is the chemical symbol for ruthenium?", ["Ru"]),
    ("chemistry", "What is the chemical symbol for praseodymium?", ["Pr"]),
    ("chemistry", "What is the chemical symbol for hafnium?", ["Hf"]),
    ("chemistry", "Which element has the atomic number 6?", ["carbon"]),
    ("chemistry", "Which element has the atomic number 8?", ["oxygen"]),
    ("chemistry", "Which element has the atomic number 46?", ["palladium"]),
    ("chemistry", "Which element has the atomic number 72?", ["hafnium"]),
    # people
    ("people", "Who was the first president of the United States?", ["George Washington", "Washington"]),
    ("people", "Who developed the theory of relativity?", ["Einstein", "Albert Einstein"]),
    ("people", "Who discovered penicillin?", ["Fleming", "Alexander Fleming"]),
    ("people", "Who was the first man to walk on the Moon?", ["Neil Armstrong", "Armstrong"]),
    ("people", "Who invented the telephone?", ["Bell", "Alexander Graham Bell"]),
    ("people", "Who painted The Starry Night?", ["Van Gogh", "Vincent van Gogh"]),
    ("people", "Who wrote Hamlet?", ["Shakespeare", "William Shakespeare"]),
    ("people", "Who formulated the laws of motion and universal gravitation?", ["Newton", "Isaac Newton"]),
    ("people", "Who was the first woman to win a Nobel Prize?", ["Marie Curie", "Curie"]),
    ("people", "Who composed The Four Seasons?", ["Vivaldi", "Antonio Vivaldi"]),
    ("people", "Who was the first emperor of Rome?", ["Augustus", "Octavian"]),
    ("people", "Who discovered the electron?", ["J. J. Thomson", "Thomson", "J.J. Thomson"]),
    ("people", "Who invented the mercury thermometer?", ["Fahrenheit", "Daniel Gabriel Fahrenheit"]),
    ("people", "Who was the second president of the United States?", ["John Adams", "Adams"]),
    ("people", "Who wrote the novel Things Fall Apart?", ["Chinua Achebe", "Achebe"]),
    ("people", "Who composed the opera The Bartered Bride?", ["Smetana", "Bedrich Smetana"]),
    ("people", "Who painted The Night Watch?", ["Rembrandt"]),
    ("people", "Who sculpted The Thinker?", ["Rodin", "Auguste Rodin"]),
    ("people", "Who wrote the novel Oblomov?", ["Goncharov", "Ivan Goncharov"]),
    ("people", "Who discovered the planet Uranus?", ["William Herschel", "Herschel"]),
    ("people", "Who was the last tsar of Russia?", ["Nicholas II", "Nicholas"]),
    ("people", "Who founded the Mongol Empire?", ["Genghis Khan", "Chinggis Khan"]),
    # things and nature
    ("nature", "What colour is a ripe banana?", ["yellow"]),
    ("nature", "What do bees make?", ["honey"]),
    ("nature", "What is the largest bird in the world?", ["ostrich"]),
    ("nature", "What animal is known as the king of the jungle?", ["lion"]),
    ("nature", "What is the main ingredient of guacamole?", ["avocado"]),
    ("nature", "What is the closest star to the Earth?", ["Sun", "the Sun"]),
    ("nature", "What is the boiling point of water in Celsius at sea level?", ["100"]),
    ("nature", "What gas do humans breathe out?", ["carbon dioxide", "CO2"]),
    ("nature", "What is the largest organ of the human body?", ["skin"]),
    ("nature", "What is the national animal of Scotland?", ["unicorn"]),
    ("nature", "What is a baby kangaroo called?", ["joey"]),
    ("nature", "What is the only mammal capable of true flight?", ["bat", "bats"]),
    ("nature", "What is the largest species of shark?", ["whale shark"]),
    ("nature", "What is the fruit of the oak tree called?", ["acorn", "acorns"]),
    ("nature", "What is a group of crows called?", ["murder", "a murder"]),
    ("nature", "What is the rarest blood type?", ["AB negative", "AB-"]),
    ("nature", "What is the name of the pigment that makes plants green?", ["chlorophyll"]),
    ("nature", "What is the hardest mineral on the Mohs scale after diamond?", ["corundum"]),
    ("nature", "What is the tallest tree species in the world?", ["coast redwood", "redwood", "Sequoia sempervirens"]),
    ("nature", "Which bird lays the largest eggs?", ["ostrich"]),
    # third batch: everyday knowledge, mostly easy, with some harder items of the same kinds
    ("everyday", "What colour is the sky on a clear day?", ["blue"]),
    ("everyday", "What colour is grass?", ["green"]),
    ("everyday", "What colour do you get by mixing blue and yellow?", ["green"]),
    ("everyday", "What colour do you get by mixing red and white?", ["pink"]),
    ("everyday", "What is the opposite of hot?", ["cold"]),
    ("everyday", "What is the opposite of up?", ["down"]),
    ("everyday", "What is frozen water called?", ["ice"]),
    ("everyday", "What do cows drink?", ["water"]),
    ("everyday", "Which animal says moo?", ["cow", "cows"]),
    ("everyday", "Which animal barks?", ["dog", "dogs"]),
    ("everyday", "What is the young of a cat called?", ["kitten"]),
    ("everyday", "What is the young of a dog called?", ["puppy", "pup"]),
    ("everyday", "What is the young of a horse called?", ["foal", "colt", "filly"]),
    ("everyday", "What is the young of a goat called?", ["kid"]),
    ("everyday", "What is the young of a swan called?", ["cygnet"]),
    ("everyday", "What is the young of a hare called?", ["leveret"]),
    ("everyday", "What is the first month of the year?", ["January"]),
    ("everyday", "What is the last month of the year?", ["December"]),
    ("everyday", "Which month has the fewest days?", ["February"]),
    ("everyday", "What is the first day of the week in the United States?", ["Sunday"]),
    ("everyday", "What season comes after winter?", ["spring"]),
    ("everyday", "What meal is eaten in the morning?", ["breakfast"]),
    ("everyday", "What do you call a person who fixes teeth?", ["dentist"]),
    ("everyday", "What do you call a doctor for animals?", ["vet", "veterinarian"]),
    ("everyday", "What do you call a person who studies rocks?", ["geologist"]),
    ("everyday", "What do you call a person who makes barrels?", ["cooper"]),
    ("everyday", "What do you call a person who makes arrows?", ["fletcher"]),
    ("everyday", "What is the plural of mouse?", ["mice"]),
    ("everyday", "What is the plural of child?", ["children"]),
    ("everyday", "What is the plural of cactus?", ["cacti", "cactuses"]),
    ("everyday", "What instrument has black and white keys?", ["piano"]),
    ("everyday", "What sport is played at Wimbledon?", ["tennis"]),
    ("everyday", "In which sport is a shuttlecock used?", ["badminton"]),
    ("everyday", "In which sport is the term 'googly' used?", ["cricket"]),
    ("everyday", "What is the main language spoken in Mexico?", ["Spanish"]),
    ("everyday", "What is the main language spoken in Germany?", ["German"]),
    ("everyday", "What is the main language spoken in Japan?", ["Japanese"]),
    ("everyday", "What is the main language spoken in Suriname?", ["Dutch"]),
    ("everyday", "What is the main language spoken in Angola?", ["Portuguese"]),
    ("everyday", "What is the main language spoken in Haiti?", ["Haitian Creole", "Creole", "French"]),
    # body, food and home
    ("body", "How many eyes does a human have?", ["2", "two"]),
    ("body", "How many fingers are on one human hand?", ["5", "five"]),
    ("body", "Which organ do humans use to breathe?", ["lungs", "lung"]),
    ("body", "Which organ filters blood to make urine?", ["kidneys", "kidney"]),
    ("body", "What is the largest bone in the human skull?", ["parietal", "occipital", "mandible"]),
    ("body", "What is the smallest bone in the human body?", ["stapes", "stirrup"]),
    ("body", "Which vitamin does the skin make in sunlight?", ["vitamin D", "D"]),
    ("body", "Which gland produces insulin?", ["pancreas"]),
    ("food", "What is the main ingredient of bread?", ["flour", "wheat"]),
    ("food", "What fruit is used to make wine?", ["grapes", "grape"]),
    ("food", "What is made from milk by churning?", ["butter"]),
    ("food", "What is sushi traditionally wrapped in?", ["seaweed", "nori"]),
    ("food", "Which country does paella come from?", ["Spain"]),
    ("food", "Which country does the dish pierogi come from?", ["Poland"]),
    ("food", "Which spice gives paella its yellow colour?", ["saffron"]),
    ("food", "Which nut is used to make marzipan?", ["almond", "almonds"]),
    # space and earth
    ("space", "What is the name of Earth's natural satellite?", ["Moon", "the Moon"]),
    ("space", "Which planet has the most famous rings?", ["Saturn"]),
    ("space", "What galaxy do we live in?", ["Milky Way", "the Milky Way"]),
    ("space", "Which planet is third from the Sun?", ["Earth"]),
    ("space", "Which planet rotates on its side?", ["Uranus"]),
    ("space", "Which planet has the moon Phobos?", ["Mars"]),
    ("space", "What is the name of the nearest large galaxy to the Milky Way?", ["Andromeda"]),
    ("space", "Who was the first person in space?", ["Yuri Gagarin", "Gagarin"]),
    ("space", "What is the name of the first artificial satellite?", ["Sputnik", "Sputnik 1"]),
    ("space", "Which dwarf planet was reclassified in 2006?", ["Pluto"]),
    ("earth", "What is the largest continent?", ["Asia"]),
    ("earth", "What is the smallest continent?", ["Australia", "Oceania"]),
    ("earth", "What is the largest island in the world?", ["Greenland"]),
    ("earth", "What is the largest lake in Africa?", ["Lake Victoria", "Victoria"]),
    ("earth", "What is the longest mountain range in the world?", ["Andes", "the Andes"]),
    ("earth", "Which ocean lies between Africa and Australia?", ["Indian", "Indian Ocean"]),
    ("earth", "Which sea has no coastline?", ["Sargasso", "Sargasso Sea"]),
    ("earth", "What is the capital of the US state of California?", ["Sacramento"]),
    ("earth", "What is the capital of the US state of Texas?", ["Austin"]),
    ("earth", "What is the capital of the US state of Vermont?", ["Montpelier"]),
    ("earth", "What is the capital of the Canadian province of Quebec?", ["Quebec City", "Québec"]),
    ("earth", "What is the capital of the Canadian province of Manitoba?", ["Winnipeg"]),
    ("earth", "What is the capital of the Australian state of Tasmania?", ["Hobart"]),
    # inventions, history
    ("history", "Who invented the light bulb?", ["Edison", "Thomas Edison", "Swan"]),
    ("history", "Who was the first female prime minister of the United Kingdom?", ["Margaret Thatcher", "Thatcher"]),
    ("history", "Which ship sank in 1912 after hitting an iceberg?", ["Titanic", "the Titanic"]),
    ("history", "In which country did the Olympic Games originate?", ["Greece"]),
    ("history", "Which empire built Machu Picchu?", ["Inca", "Incas", "Inca Empire"]),
    ("history", "Which civilisation built the pyramids of Giza?", ["Egyptians", "Egyptian", "ancient Egyptians"]),
    ("history", "Who was the Greek god of the sea?", ["Poseidon"]),
    ("history", "Who was the king of the Greek gods?", ["Zeus"]),
    ("history", "Who was the Norse god of thunder?", ["Thor"]),
    ("history", "Who was the Egyptian god of the sun?", ["Ra", "Re"]),
    ("history", "Who was the Roman goddess of the hearth?", ["Vesta"]),
    ("history", "Who was the Aztec god of war?", ["Huitzilopochtli"]),
    ("history", "Who was the first king of Prussia?", ["Frederick I", "Frederick"]),
    ("history", "Who invented the printing press with movable type in Europe?", ["Gutenberg", "Johannes Gutenberg"]),
    ("history", "Who invented the cotton gin?", ["Eli Whitney", "Whitney"]),
    ("history", "Who invented the stethoscope?", ["Laennec", "René Laennec", "Rene Laennec"]),
]

# A check set never used for training: new facts and arithmetic in other phrasings, for measuring the
# shipped probes on unseen questions (``python -m grade evaluate``); see grade/assets/probes/README.md.
CHECK_FACTS = [
    ("Which city is the capital of Scotland?", ["Edinburgh"]),
    ("Name the capital city of Wales.", ["Cardiff"]),
    ("Which city is the capital of Tunisia?", ["Tunis"]),
    ("Which city is the capital of Cambodia?", ["Phnom Penh"]),
    ("Name the capital city of Algeria.", ["Algiers"]),
    ("Which city is the capital of Equatorial Guinea?", ["Malabo", "Ciudad de la Paz"]),
    ("Name the capital city of Guinea-Bissau.", ["Bissau"]),
    ("Which city is the capital of Sierra Leone?", ["Freetown"]),
    ("Name the capital city of Kosovo.", ["Pristina", "Prishtina"]),
    ("Which city is the capital of North Macedonia?", ["Skopje"]),
    ("Which city is the capital of Montenegro?", ["Podgorica"]),
    ("Name the capital city of Seychelles.", ["Victoria"]),
    ("Which city is the capital of Saint Lucia?", ["Castries"]),
    ("Which city is the capital of Grenada?", ["St. George's", "St George's", "Saint George's"]),
    ("Which metal has the chemical symbol Zn?", ["zinc"]),
    ("Which metal has the chemical symbol Ni?", ["nickel"]),
    ("Which metal has the chemical symbol Al?", ["aluminium", "aluminum"]),
    ("Which element has the chemical symbol Os?", ["osmium"]),
    ("Which element has the chemical symbol Ir?", ["iridium"]),
    ("Which element has the chemical symbol Te?", ["tellurium"]),
    ("Which element has the chemical symbol Ge?", ["germanium"]),
    ("What is the symbol of the element calcium?", ["Ca"]),
    ("What is the symbol of the element nitrogen?", ["N"]),
    ("What is the symbol of the element chlorine?", ["Cl"]),
    ("Who wrote the play Macbeth?", ["Shakespeare", "William Shakespeare"]),
    ("Who wrote the novel Oliver Twist?", ["Dickens", "Charles Dickens"]),
    ("Who wrote the novel Moby-Dick?", ["Melville", "Herman Melville"]),
    ("Who wrote the novel The Great Gatsby?", ["Fitzgerald", "F. Scott Fitzgerald"]),
    ("Who wrote the novel Frankenstein?", ["Mary Shelley", "Shelley"]),
    ("Who wrote the novel Dracula?", ["Bram Stoker", "Stoker"]),
    ("Who wrote the novel Buddenbrooks?", ["Thomas Mann", "Mann"]),
    ("Who wrote the novel The Trial?", ["Kafka", "Franz Kafka"]),
    ("Who wrote the novel Hunger, published in 1890?", ["Knut Hamsun", "Hamsun"]),
    ("Who wrote the novel Nostromo?", ["Joseph Conrad", "Conrad"]),
    ("Who composed the opera Carmen?", ["Bizet", "Georges Bizet"]),
    ("Who composed the ballet Swan Lake?", ["Tchaikovsky", "Pyotr Ilyich Tchaikovsky"]),
    ("Who composed the opera Boris Godunov?", ["Mussorgsky", "Modest Mussorgsky"]),
    ("Who composed the symphonic poem Finlandia?", ["Sibelius", "Jean Sibelius"]),
    ("Who composed the opera Der Freischütz?", ["Weber", "Carl Maria von Weber"]),
    ("Who painted the ceiling of the Sistine Chapel?", ["Michelangelo"]),
    ("Who painted Guernica?", ["Picasso", "Pablo Picasso"]),
    ("Who painted The Persistence of Memory?", ["Dalí", "Dali", "Salvador Dalí", "Salvador Dali"]),
    ("Who painted The Hay Wain?", ["Constable", "John Constable"]),
    ("Who painted The Ambassadors in 1533?", ["Holbein", "Hans Holbein"]),
    ("Which planet is famous for its Great Red Spot?", ["Jupiter"]),
    ("What is the hottest planet in the solar system?", ["Venus"]),
    ("How many planets are in the solar system?", ["8", "eight"]),
    ("How many moons does Mars have?", ["2", "two"]),
    ("What is the largest moon of Jupiter?", ["Ganymede"]),
    ("What is the second largest moon of Saturn?", ["Rhea"]),
    ("How many legs does an insect have?", ["6", "six"]),
    ("How many wings does a bee have?", ["4", "four"]),
    ("How many teeth does an adult human normally have?", ["32", "thirty-two"]),
    ("How many chambers does the human heart have?", ["4", "four"]),
    ("How many chromosomes does a human body cell normally have?", ["46", "forty-six"]),
    ("What is the currency of India?", ["rupee", "Indian rupee"]),
    ("What is the currency of Switzerland?", ["franc", "Swiss franc"]),
    ("What is the currency of South Africa?", ["rand"]),
    ("What is the currency of Kazakhstan?", ["tenge"]),
    ("What is the currency of Laos?", ["kip"]),
    ("What is the currency of Paraguay?", ["guarani", "guaraní"]),
    ("What language is spoken in Portugal?", ["Portuguese"]),
    ("What language is spoken in Italy?", ["Italian"]),
    ("What language is spoken in Greenland besides Danish?", ["Greenlandic", "Kalaallisut"]),
    ("What language is spoken in the Faroe Islands besides Danish?", ["Faroese"]),
    ("What is the tallest animal in the world?", ["giraffe"]),
    ("What is the slowest mammal in the world?", ["sloth"]),
    ("What is the largest living reptile?", ["saltwater crocodile", "crocodile"]),
    ("What is the largest living amphibian?", ["Chinese giant salamander", "giant salamander", "salamander"]),
    ("In which year did the Second World War end?", ["1945"]),
    ("In which year did Columbus first reach the Americas?", ["1492"]),
    ("In which year did the French Revolution begin?", ["1789"]),
    ("In which year was the Peace of Utrecht signed?", ["1713"]),
    ("In which year did the Battle of Lepanto take place?", ["1571"]),
    ("In which year was the Edict of Nantes issued?", ["1598"]),
]
CHECK_ARITHMETIC = [
    ("What does 6 + 3 equal?", 9), ("What does 4 + 4 equal?", 8), ("What does 9 + 1 equal?", 10),
    ("What does 8 - 3 equal?", 5), ("What does 2 * 3 equal?", 6), ("What does 5 * 5 equal?", 25),
    ("What does 10 + 10 equal?", 20), ("What does 3 * 4 equal?", 12), ("What does 9 - 4 equal?", 5),
    ("What does 1 + 1 equal?", 2), ("What does 47 + 38 equal?", 85), ("What does 64 - 27 equal?", 37),
    ("What does 18 * 7 equal?", 126), ("What does 56 + 89 equal?", 145), ("What does 93 - 48 equal?", 45),
    ("What does 34 * 12 equal?", 408), ("What does 72 * 15 equal?", 1080), ("What does 418 + 397 equal?", 815),
    ("What does 906 - 458 equal?", 448), ("What does 123 * 45 equal?", 5535), ("What does 612 * 38 equal?", 23256),
    ("What does 25 * 4 equal?", 100), ("What does 100 - 1 equal?", 99), ("What does 7 * 8 equal?", 56),
    ("What does 81 + 19 equal?", 100), ("What does 250 + 250 equal?", 500), ("What does 13 * 13 equal?", 169),
    ("What does 999 + 1 equal?", 1000), ("What does 6 * 7 equal?", 42), ("What does 15 + 27 equal?", 42),
]


def check_facts() -> list[dict]:
    return [{"id": f"check-fact-{number:03d}", "question": question, "answers": answers, "solution": None,
             "context": None, "choices": None, "subject": "fact"}
            for number, (question, answers) in enumerate(CHECK_FACTS)]


def check_arithmetic() -> list[dict]:
    return [{"id": f"check-arith-{number:03d}", "question": question,
             "answers": [str(value)] + ([f"{value:,}"] if value >= 1000 else []), "solution": None,
             "context": None, "choices": None, "subject": "arithmetic"}
            for number, (question, value) in enumerate(CHECK_ARITHMETIC)]


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


def sample_data_questions() -> set[str]:
    """Questions of the teaching sets in ``sample_data/``: left out here, so no question is in two sets."""
    seen = set()
    for path in (ROOT / "sample_data").glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                seen.add(" ".join(json.loads(line)["question"].lower().split()))
    return seen


def world_facts() -> list[dict]:
    rows = []
    taken = sample_data_questions()
    for number, (subject, question, answers) in enumerate(WORLD_FACTS):  # ids keep the list position
        if " ".join(question.lower().split()) in taken:
            continue
        rows.append({"id": f"world-{subject}-{number:03d}", "question": question, "answers": answers,
                     "solution": None, "context": None, "choices": None, "subject": subject})
    return rows


# Other wordings of the same facts and of new sums: a probe trained on one wording per kind of
# question learns the wording. None of these templates is used by the check sets.
REWORDINGS = [
    (r"^What is the capital of (.+)\?$", ["Which city serves as the capital of {0}?", "Tell me the capital of {0}.",
                                          "{0} has which city as its capital?"]),
    (r"^What is the chemical symbol for (.+)\?$", ["Give the chemical symbol of {0}.",
                                                   "Which one- or two-letter symbol stands for {0}?"]),
    (r"^Which element has the chemical symbol (.+)\?$", ["Tell me which element is written {0}.",
                                                         "The chemical symbol {0} stands for which element?"]),
    (r"^Which element has the atomic number (.+)\?$", ["Tell me which element is number {0} in the periodic table."]),
    (r"^Who wrote (.+)\?$", ["Tell me who the author of {0} is.", "{0} was written by whom?"]),
    (r"^Who painted (.+)\?$", ["Tell me which artist painted {0}.", "{0} was painted by whom?"]),
    (r"^Who composed (.+)\?$", ["Tell me who composed {0}.", "{0} was composed by whom?"]),
    (r"^What is the currency of (.+)\?$", ["Tell me the currency used in {0}.", "Which money is used in {0}?"]),
    (r"^In which country is (.+)\?$", ["Tell me which country {0} is in.", "{0} lies in which country?"]),
    (r"^How many (.+)\?$", ["Tell me how many {0}.", "Do you know how many {0}?"]),
]
WRAPPERS = ["Quick question: {q}", "I was wondering: {q}", "Trivia time! {q}", "Here is a question for you. {q}"]
ARITHMETIC_REWORDINGS = {
    "+": ["Calculate {a} + {b}.", "{a} + {b} = ?", "What is the result of {a} + {b}?", "Work out {a} plus {b}."],
    "-": ["Calculate {a} - {b}.", "{a} - {b} = ?", "What is the result of {a} - {b}?", "Work out {a} minus {b}."],
    "*": ["Calculate {a} * {b}.", "{a} x {b} = ?", "What is the result of {a} times {b}?", "Work out {a} multiplied by {b}."],
}


def reworded(seed: int = 1) -> list[dict]:
    """Each world fact once more in another wording, and new sums in other wordings."""
    import re

    rng = random.Random(seed)
    rows = []
    for fact in world_facts():
        question = fact["question"]
        for pattern, templates in REWORDINGS:
            match = re.match(pattern, question)
            if match:
                subject = match.group(1)
                new = rng.choice(templates).format(subject[0].upper() + subject[1:] if templates[0].startswith("{0}") else subject)
                break
        else:
            new = rng.choice(WRAPPERS).format(q=question)
        if new[0].islower():
            new = new[0].upper() + new[1:]
        rows.append({**fact, "id": fact["id"] + "-reworded", "question": new})
    taken = {(r["subject"], r["id"]) for r in arithmetic()}
    made = 0
    for op, (a_lo, a_hi), (b_lo, b_hi), count in LEVELS:
        level = f"{op}{len(str(a_hi))}x{len(str(b_hi))}"
        for _ in range(max(6, count // 2)):
            a, b = rng.randint(a_lo, a_hi), rng.randint(b_lo, b_hi)
            row_id = f"arith-{level}-{a}-{b}-reworded"
            if (level, row_id) in taken:
                continue
            taken.add((level, row_id))
            value = a + b if op == "+" else a - b if op == "-" else a * b
            rows.append({"id": row_id, "question": rng.choice(ARITHMETIC_REWORDINGS[op]).format(a=a, b=b),
                         "answers": [str(value)] + ([f"{value:,}"] if value >= 1000 else []), "solution": None,
                         "context": None, "choices": None, "subject": level})
            made += 1
    return rows


def main() -> int:
    import argparse

    # parsed first so that `--help` prints the description instead of rewriting the shipped files
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    sets = (("arithmetic", arithmetic()), ("world_facts", world_facts()), ("reworded", reworded()),
            ("check_facts", check_facts()),
            ("check_arithmetic", check_arithmetic()))
    for name, rows in sets:
        path = (CHECK_OUT if name.startswith("check") else OUT) / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"{len(rows)} questions -> {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
