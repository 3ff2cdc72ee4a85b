class Attempt < ApplicationRecord
end
